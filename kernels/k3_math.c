/* The library's own exp, expf and tanhf (k3_internal.h): the same bits on every machine.
 *
 * Why: libm differs between platforms. Measured here (docs/PORTS.md §1): glibc 2.36's tanhf gives
 * a different float than x86-64's for 219 of 2M inputs on aarch64 (its build fuses multiply-adds);
 * macOS has a different libm altogether; newer glibc releases replace float functions with
 * correctly rounded ones. A kernel that calls libm therefore gives other logits bits on another
 * machine, with no change in k3.
 *
 * What: the algorithms x86-64 glibc 2.36 uses, written out with every rounding explicit, so the
 * x86-64 results of this project stay what they were:
 *  - k3_expf, k3_exp: the ARM optimized-routines algorithms (glibc ≥ 2.27, musl): x = k·ln2/N + r,
 *    2^(k/N) from a table, a short polynomial in r. glibc picks FMA builds of both on x86-64 CPUs
 *    with FMA (and aarch64's build fuses the same multiply-adds), so the fused steps are explicit
 *    fma() calls here — exactly rounded by definition, hence identical wherever fma() is correct
 *    (an instruction on aarch64 and FMA x86-64 CPUs, glibc's exact emulation elsewhere).
 *  - k3_tanhf: fdlibm's tanhf/expm1f in float arithmetic without fusion (x86-64 glibc's build).
 * Tables: T32[i] = bits(2^(i/32)) − (i << 47); T128[2k] = bits(2^(k/128)/H_k − 1),
 * T128[2k+1] = bits(H_k) − (k << 45), H_k = 2^(k/128) rounded to double (all rounded to nearest;
 * regenerated from these definitions at 80 digits, they equal the published tables).
 * Which steps glibc's build fuses was found by measurement, not guessed: every one of the 2^32
 * floats gives glibc 2.36's expf and tanhf bits on this project's x86-64 machine, and exp does on
 * 10^7 random arguments over its domain plus 1.3·10^6 next to the rounding ties of its reduction
 * (docs/PORTS.md §1; test/kernels-libm-bits.test.ts pins the kernels' bits). */
#include "k3_internal.h"
#include <stdint.h>

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint64_t d2u(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
static inline double u2d(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }

/* ---------------------------------------------------------------- expf */
const uint64_t k3_expf_T32[32] = {
  0x3ff0000000000000u, 0x3fefd9b0d3158574u, 0x3fefb5586cf9890fu, 0x3fef9301d0125b51u,
  0x3fef72b83c7d517bu, 0x3fef54873168b9aau, 0x3fef387a6e756238u, 0x3fef1e9df51fdee1u,
  0x3fef06fe0a31b715u, 0x3feef1a7373aa9cbu, 0x3feedea64c123422u, 0x3feece086061892du,
  0x3feebfdad5362a27u, 0x3feeb42b569d4f82u, 0x3feeab07dd485429u, 0x3feea47eb03a5585u,
  0x3feea09e667f3bcdu, 0x3fee9f75e8ec5f74u, 0x3feea11473eb0187u, 0x3feea589994cce13u,
  0x3feeace5422aa0dbu, 0x3feeb737b0cdc5e5u, 0x3feec49182a3f090u, 0x3feed503b23e255du,
  0x3feee89f995ad3adu, 0x3feeff76f2fb5e47u, 0x3fef199bdd85529cu, 0x3fef3720dcef9069u,
  0x3fef5818dcfba487u, 0x3fef7c97337b9b5fu, 0x3fefa4afa2a490dau, 0x3fefd0765b6e4540u,
};

float k3_expf(float x) {
  const double N = 32.0;
  uint32_t abstop = (f2u(x) >> 20) & 0x7ff;
  if (abstop >= (f2u(88.0f) >> 20)) { /* |x| ≥ 88, inf or nan */
    if (f2u(x) == f2u(-INFINITY)) return 0.0f;
    if (abstop >= (f2u(INFINITY) >> 20)) return x + x;
    if (x > 0x1.62e42ep6f) return INFINITY;   /* overflow */
    if (x < -0x1.9fe368p6f) return 0.0f;     /* underflow */
  }
  /* z = x·N/ln2 feeds two additions, and GCC's FMA build fuses both: kd = round(z) via the
   * 1.5·2^52 shift (ties to even), r = z − kd. Measured: with r unfused, 2 of the 2^32 inputs
   * (0x4202422f, 0xc27c65d9) round the other way from glibc. */
  const double invln2N = 0x1.71547652b82fep+0 * N;
  double xd = (double)x;
  double kd = fma(invln2N, xd, 0x1.8p+52);
  uint64_t ki = d2u(kd);
  kd -= 0x1.8p+52;
  double r = fma(invln2N, xd, -kd);
  double s = u2d(k3_expf_T32[ki % 32] + (ki << 47));
  double p = fma(0x1.c6af84b912394p-5 / N / N / N, r, 0x1.ebfce50fac4f3p-3 / N / N);
  double r2 = r * r;
  double y = fma(0x1.62e42ff0c52d6p-1 / N, r, 1.0);
  y = fma(p, r2, y);
  y = y * s;
  return (float)y;
}

/* ---------------------------------------------------------------- exp (double) */
static const uint64_t T128[256] = {
  0x0000000000000000u, 0x3ff0000000000000u, 0x3c9b3b4f1a88bf6eu, 0x3feff63da9fb3335u,
  0xbc7160139cd8dc5du, 0x3fefec9a3e778061u, 0xbc905e7a108766d1u, 0x3fefe315e86e7f85u,
  0x3c8cd2523567f613u, 0x3fefd9b0d3158574u, 0xbc8bce8023f98efau, 0x3fefd06b29ddf6deu,
  0x3c60f74e61e6c861u, 0x3fefc74518759bc8u, 0x3c90a3e45b33d399u, 0x3fefbe3ecac6f383u,
  0x3c979aa65d837b6du, 0x3fefb5586cf9890fu, 0x3c8eb51a92fdeffcu, 0x3fefac922b7247f7u,
  0x3c3ebe3d702f9cd1u, 0x3fefa3ec32d3d1a2u, 0xbc6a033489906e0bu, 0x3fef9b66affed31bu,
  0xbc9556522a2fbd0eu, 0x3fef9301d0125b51u, 0xbc5080ef8c4eea55u, 0x3fef8abdc06c31ccu,
  0xbc91c923b9d5f416u, 0x3fef829aaea92de0u, 0x3c80d3e3e95c55afu, 0x3fef7a98c8a58e51u,
  0xbc801b15eaa59348u, 0x3fef72b83c7d517bu, 0xbc8f1ff055de323du, 0x3fef6af9388c8deau,
  0x3c8b898c3f1353bfu, 0x3fef635beb6fcb75u, 0xbc96d99c7611eb26u, 0x3fef5be084045cd4u,
  0x3c9aecf73e3a2f60u, 0x3fef54873168b9aau, 0xbc8fe782cb86389du, 0x3fef4d5022fcd91du,
  0x3c8a6f4144a6c38du, 0x3fef463b88628cd6u, 0x3c807a05b0e4047du, 0x3fef3f49917ddc96u,
  0x3c968efde3a8a894u, 0x3fef387a6e756238u, 0x3c875e18f274487du, 0x3fef31ce4fb2a63fu,
  0x3c80472b981fe7f2u, 0x3fef2b4565e27cddu, 0xbc96b87b3f71085eu, 0x3fef24dfe1f56381u,
  0x3c82f7e16d09ab31u, 0x3fef1e9df51fdee1u, 0xbc3d219b1a6fbffau, 0x3fef187fd0dad990u,
  0x3c8b3782720c0ab4u, 0x3fef1285a6e4030bu, 0x3c6e149289cecb8fu, 0x3fef0cafa93e2f56u,
  0x3c834d754db0abb6u, 0x3fef06fe0a31b715u, 0x3c864201e2ac744cu, 0x3fef0170fc4cd831u,
  0x3c8fdd395dd3f84au, 0x3feefc08b26416ffu, 0xbc86a3803b8e5b04u, 0x3feef6c55f929ff1u,
  0xbc924aedcc4b5068u, 0x3feef1a7373aa9cbu, 0xbc9907f81b512d8eu, 0x3feeecae6d05d866u,
  0xbc71d1e83e9436d2u, 0x3feee7db34e59ff7u, 0xbc991919b3ce1b15u, 0x3feee32dc313a8e5u,
  0x3c859f48a72a4c6du, 0x3feedea64c123422u, 0xbc9312607a28698au, 0x3feeda4504ac801cu,
  0xbc58a78f4817895bu, 0x3feed60a21f72e2au, 0xbc7c2c9b67499a1bu, 0x3feed1f5d950a897u,
  0x3c4363ed60c2ac11u, 0x3feece086061892du, 0x3c9666093b0664efu, 0x3feeca41ed1d0057u,
  0x3c6ecce1daa10379u, 0x3feec6a2b5c13cd0u, 0x3c93ff8e3f0f1230u, 0x3feec32af0d7d3deu,
  0x3c7690cebb7aafb0u, 0x3feebfdad5362a27u, 0x3c931dbdeb54e077u, 0x3feebcb299fddd0du,
  0xbc8f94340071a38eu, 0x3feeb9b2769d2ca7u, 0xbc87deccdc93a349u, 0x3feeb6daa2cf6642u,
  0xbc78dec6bd0f385fu, 0x3feeb42b569d4f82u, 0xbc861246ec7b5cf6u, 0x3feeb1a4ca5d920fu,
  0x3c93350518fdd78eu, 0x3feeaf4736b527dau, 0x3c7b98b72f8a9b05u, 0x3feead12d497c7fdu,
  0x3c9063e1e21c5409u, 0x3feeab07dd485429u, 0x3c34c7855019c6eau, 0x3feea9268a5946b7u,
  0x3c9432e62b64c035u, 0x3feea76f15ad2148u, 0xbc8ce44a6199769fu, 0x3feea5e1b976dc09u,
  0xbc8c33c53bef4da8u, 0x3feea47eb03a5585u, 0xbc845378892be9aeu, 0x3feea34634ccc320u,
  0xbc93cedd78565858u, 0x3feea23882552225u, 0x3c5710aa807e1964u, 0x3feea155d44ca973u,
  0xbc93b3efbf5e2228u, 0x3feea09e667f3bcdu, 0xbc6a12ad8734b982u, 0x3feea012750bdabfu,
  0xbc6367efb86da9eeu, 0x3fee9fb23c651a2fu, 0xbc80dc3d54e08851u, 0x3fee9f7df9519484u,
  0xbc781f647e5a3ecfu, 0x3fee9f75e8ec5f74u, 0xbc86ee4ac08b7db0u, 0x3fee9f9a48a58174u,
  0xbc8619321e55e68au, 0x3fee9feb564267c9u, 0x3c909ccb5e09d4d3u, 0x3feea0694fde5d3fu,
  0xbc7b32dcb94da51du, 0x3feea11473eb0187u, 0x3c94ecfd5467c06bu, 0x3feea1ed0130c132u,
  0x3c65ebe1abd66c55u, 0x3feea2f336cf4e62u, 0xbc88a1c52fb3cf42u, 0x3feea427543e1a12u,
  0xbc9369b6f13b3734u, 0x3feea589994cce13u, 0xbc805e843a19ff1eu, 0x3feea71a4623c7adu,
  0xbc94d450d872576eu, 0x3feea8d99b4492edu, 0x3c90ad675b0e8a00u, 0x3feeaac7d98a6699u,
  0x3c8db72fc1f0eab4u, 0x3feeace5422aa0dbu, 0xbc65b6609cc5e7ffu, 0x3feeaf3216b5448cu,
  0x3c7bf68359f35f44u, 0x3feeb1ae99157736u, 0xbc93091fa71e3d83u, 0x3feeb45b0b91ffc6u,
  0xbc5da9b88b6c1e29u, 0x3feeb737b0cdc5e5u, 0xbc6c23f97c90b959u, 0x3feeba44cbc8520fu,
  0xbc92434322f4f9aau, 0x3feebd829fde4e50u, 0xbc85ca6cd7668e4bu, 0x3feec0f170ca07bau,
  0x3c71affc2b91ce27u, 0x3feec49182a3f090u, 0x3c6dd235e10a73bbu, 0x3feec86319e32323u,
  0xbc87c50422622263u, 0x3feecc667b5de565u, 0x3c8b1c86e3e231d5u, 0x3feed09bec4a2d33u,
  0xbc91bbd1d3bcbb15u, 0x3feed503b23e255du, 0x3c90cc319cee31d2u, 0x3feed99e1330b358u,
  0x3c8469846e735ab3u, 0x3feede6b5579fdbfu, 0xbc82dfcd978e9db4u, 0x3feee36bbfd3f37au,
  0x3c8c1a7792cb3387u, 0x3feee89f995ad3adu, 0xbc907b8f4ad1d9fau, 0x3feeee07298db666u,
  0xbc55c3d956dcaebau, 0x3feef3a2b84f15fbu, 0xbc90a40e3da6f640u, 0x3feef9728de5593au,
  0xbc68d6f438ad9334u, 0x3feeff76f2fb5e47u, 0xbc91eee26b588a35u, 0x3fef05b030a1064au,
  0x3c74ffd70a5fddcdu, 0x3fef0c1e904bc1d2u, 0xbc91bdfbfa9298acu, 0x3fef12c25bd71e09u,
  0x3c736eae30af0cb3u, 0x3fef199bdd85529cu, 0x3c8ee3325c9ffd94u, 0x3fef20ab5fffd07au,
  0x3c84e08fd10959acu, 0x3fef27f12e57d14bu, 0x3c63cdaf384e1a67u, 0x3fef2f6d9406e7b5u,
  0x3c676b2c6c921968u, 0x3fef3720dcef9069u, 0xbc808a1883ccb5d2u, 0x3fef3f0b555dc3fau,
  0xbc8fad5d3ffffa6fu, 0x3fef472d4a07897cu, 0xbc900dae3875a949u, 0x3fef4f87080d89f2u,
  0x3c74a385a63d07a7u, 0x3fef5818dcfba487u, 0xbc82919e2040220fu, 0x3fef60e316c98398u,
  0x3c8e5a50d5c192acu, 0x3fef69e603db3285u, 0x3c843a59ac016b4bu, 0x3fef7321f301b460u,
  0xbc82d52107b43e1fu, 0x3fef7c97337b9b5fu, 0xbc892ab93b470dc9u, 0x3fef864614f5a129u,
  0x3c74b604603a88d3u, 0x3fef902ee78b3ff6u, 0x3c83c5ec519d7271u, 0x3fef9a51fbc74c83u,
  0xbc8ff7128fd391f0u, 0x3fefa4afa2a490dau, 0xbc8dae98e223747du, 0x3fefaf482d8e67f1u,
  0x3c8ec3bc41aa2008u, 0x3fefba1bee615a27u, 0x3c842b94c3a9eb32u, 0x3fefc52b376bba97u,
  0x3c8a64a931d185eeu, 0x3fefd0765b6e4540u, 0xbc8e37bae43be3edu, 0x3fefdbfdad9cbe14u,
  0x3c77893b4d91cd9du, 0x3fefe7c1819e90d8u, 0x3c5305c14160cc89u, 0x3feff3c22b8f71f1u,
};

/* scale·(1 + tmp) when the scale's exponent over- or underflowed (|x| > 512). */
static double exp_special(double tmp, uint64_t sbits, uint64_t ki) {
  if ((ki & 0x80000000) == 0) { /* k > 0: may overflow */
    double scale = u2d(sbits - (1009ull << 52));
    return 0x1p1009 * fma(scale, tmp, scale);
  }
  /* k < 0: may be subnormal. scale·tmp has two uses here, and glibc's FMA build (GCC) fuses
   * neither: measured, fusing them changes the result for some x < −512. */
  double scale = u2d(sbits + (1022ull << 52));
  double st = scale * tmp;
  double y = scale + st;
  if (y < 1.0) { /* round once, in the normal range, before scaling into the subnormals */
    double lo = scale - y + st;
    double hi = 1.0 + y;
    lo = 1.0 - hi + y + lo;
    y = (hi + lo) - 1.0;
    if (y == 0.0) y = 0.0; /* never −0 */
  }
  return 0x1p-1022 * y;
}

double k3_exp(double x) {
  const double N = 128.0;
  uint32_t abstop = (uint32_t)(d2u(x) >> 52) & 0x7ff;
  const uint32_t tiny = 0x3c9, big = 0x408; /* top 12 bits of 2^-54 and 512 */
  if (abstop - tiny >= big - tiny) {
    if (abstop - tiny >= 0x80000000u) return 1.0 + x; /* |x| < 2^-54 */
    if (abstop >= 0x409) {                            /* |x| ≥ 1024, inf or nan */
      if (d2u(x) == d2u(-INFINITY)) return 0.0;
      if (abstop >= 0x7ff) return 1.0 + x;
      return d2u(x) >> 63 ? 0.0 : INFINITY;
    }
    abstop = 0; /* 512 ≤ |x| < 1024: exp_special below */
  }
  double kd = fma(0x1.71547652b82fep0 * N, x, 0x1.8p52); /* round(x·N/ln2), fused as in glibc's build */
  uint64_t ki = d2u(kd);
  kd -= 0x1.8p52;
  double r = fma(kd, -0x1.cf79abc9e3b3ap-47, fma(kd, -0x1.62e42fefa0000p-8, x));
  uint64_t idx = 2 * (ki % 128), top = ki << 45;
  double tail = u2d(T128[idx]);
  uint64_t sbits = T128[idx + 1] + top;
  double r2 = r * r;
  double tmp = fma(r2, fma(r, 0x1.555555555543cp-3, 0x1.ffffffffffdbdp-2), tail + r);
  tmp = fma(r2 * r2, fma(r, 0x1.1111167a4d017p-7, 0x1.55555cf172b91p-5), tmp);
  if (abstop == 0) return exp_special(tmp, sbits, ki);
  double scale = u2d(sbits);
  return fma(scale, tmp, scale);
}

/* ---------------------------------------------------------------- tanhf (fdlibm, float) */
static float expm1f_fdlibm(float x) {
  const float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f, invln2 = 1.4426950216e+00f;
  const float Q1 = -3.3333335072e-02f, Q2 = 1.5873016091e-03f, Q3 = -7.9365076090e-05f;
  const float Q4 = 4.0082177293e-06f, Q5 = -2.0109921195e-07f;
  uint32_t hx = f2u(x);
  int neg = hx >> 31;
  hx &= 0x7fffffff;
  if (hx >= 0x4195b844) { /* |x| ≥ 27·ln2 */
    if (hx >= 0x42b17218) {
      if (hx > 0x7f800000) return x + x;
      if (hx == 0x7f800000) return neg ? -1.0f : x;
      if (x > 8.8721679688e+01f) return INFINITY;
    }
    if (neg) return -1.0f;
  }
  float hi, lo, c = 0.0f, t;
  int k;
  if (hx > 0x3eb17218) { /* |x| > ln2/2: reduce */
    if (hx < 0x3F851592) { /* |x| < 1.5·ln2 */
      if (!neg) { hi = x - ln2_hi; lo = ln2_lo; k = 1; }
      else { hi = x + ln2_hi; lo = -ln2_lo; k = -1; }
    } else {
      k = (int)(invln2 * x + (neg ? -0.5f : 0.5f));
      t = (float)k;
      hi = x - t * ln2_hi;
      lo = t * ln2_lo;
    }
    x = hi - lo;
    c = (hi - x) - lo;
  } else if (hx < 0x33000000) { /* |x| < 2^-25 */
    return x;
  } else {
    k = 0;
  }
  float hfx = 0.5f * x;
  float hxs = x * hfx;
  float r1 = 1.0f + hxs * (Q1 + hxs * (Q2 + hxs * (Q3 + hxs * (Q4 + hxs * Q5))));
  t = 3.0f - r1 * hfx;
  float e = hxs * ((r1 - t) / (6.0f - x * t));
  if (k == 0) return x - (x * e - hxs);
  e = (x * (e - c) - c);
  e -= hxs;
  if (k == -1) return 0.5f * (x - e) - 0.5f;
  if (k == 1) return x < -0.25f ? -2.0f * (e - (x + 0.5f)) : 1.0f + 2.0f * (x - e);
  float y;
  if (k <= -2 || k > 56) { /* exp(x) − 1 ≈ exp(x) */
    y = 1.0f - (e - x);
    y = u2f(f2u(y) + ((uint32_t)k << 23));
    return y - 1.0f;
  }
  if (k < 23) {
    t = u2f(0x3f800000 - (0x1000000 >> k)); /* 1 − 2^-k */
    y = t - (e - x);
  } else {
    t = u2f((uint32_t)(0x7f - k) << 23); /* 2^-k */
    y = x - (e + t);
    y += 1.0f;
  }
  return u2f(f2u(y) + ((uint32_t)k << 23));
}

float k3_tanhf(float x) {
  uint32_t jx = f2u(x), ix = jx & 0x7fffffff;
  if (ix >= 0x7f800000) return (int32_t)jx >= 0 ? 1.0f / x + 1.0f : 1.0f / x - 1.0f; /* ±inf, nan */
  float z;
  if (ix < 0x41b00000) { /* |x| < 22 */
    if (ix == 0) return x;
    if (ix < 0x24000000) return x * (1.0f + x); /* |x| < 2^-55 */
    if (ix >= 0x3f800000) { /* |x| ≥ 1 */
      float t = expm1f_fdlibm(2.0f * fabsf(x));
      z = 1.0f - 2.0f / (t + 2.0f);
    } else {
      float t = expm1f_fdlibm(-2.0f * fabsf(x));
      z = -t / (t + 2.0f);
    }
  } else {
    z = 1.0f - 1.0e-30f; /* = 1 */
  }
  return (int32_t)jx >= 0 ? z : -z;
}
