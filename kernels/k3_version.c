#include "k3.h"
K3_API int32_t k3_version(void) { return 1; }
