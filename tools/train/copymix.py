# Copy windows: training (and held-out evaluation) windows in which a span of the window's own text
# is repeated later in the same window, so that in-context copying pays off in the loss. Brown has
# almost no repetition inside 128 tokens, and a model trained on it alone does not learn to copy
# (1% of a repeated sentence at 1,200 steps: docs/TEST-MODELS.md "The trained demo").
#
# A copy window is built from seq + 1 consecutive corpus tokens `nat`: a span length L (uniform in
# [lo, hi]), a repeat count r (uniform in [1, rmax], at most what fits), an insertion point b
# (uniform in [L, seq + 1 − r·L]) and a source a (uniform in [0, b − L]) give
#   nat[:b] + r × nat[a:a+L] + nat[b:seq+1−r·L]:
# natural text, then the span again r times (adjacent to its first occurrence when a = b − L, like
# "S S" prompts; further back otherwise), then the text that followed b. Every token is trained
# on, as in a natural window. Repeating a span more than once gives more tokens per window that
# only copying predicts (the hope: a stronger signal for an induction-style circuit). Neither one
# nor up to 6 repeats made the demo model copy in order within 775 steps: docs/TEST-MODELS.md
# "Copy windows: a negative result".
import torch


def copy_row(nat, L, a, b, r=1):
    """nat: 1-D tensor of seq + 1 tokens → the copy window (same length); the repeats fill [b, b + r·L)."""
    n = nat.numel()
    assert r >= 1 and 0 <= a and a + L <= b and b + r * L <= n, (L, a, b, r, n)
    return torch.cat([nat[:b]] + [nat[a : a + L]] * r + [nat[b : n - r * L]])


def draw_copy(g, n, lo, hi, rmax=1):
    """(L, a, b, r) for a window of n = seq + 1 tokens, from generator g; needs 2·hi ≤ n. Draws r
    even when rmax = 1, so windows (held-out ones included) differ from those of d557ea2, before
    --copy-repeats existed."""
    L = int(torch.randint(lo, hi + 1, (1,), generator=g))
    r = int(torch.randint(1, max(1, min(rmax, (n - L) // L)) + 1, (1,), generator=g))
    b = int(torch.randint(L, n - r * L + 1, (1,), generator=g))
    a = int(torch.randint(0, b - L + 1, (1,), generator=g))
    return L, a, b, r


def heldout_copy_windows(val, seq, count, lo=8, hi=64, seed=12345):
    """`count` copy windows from held-out text (non-overlapping natural windows, every one made a copy
    window) → (rows [count, seq + 1], spans [(L, b)]). Fixed seed: the same windows every time."""
    g = torch.Generator().manual_seed(seed)
    n = min(count, (val.numel() - 1) // (seq + 1))
    rows, spans = [], []
    for i in range(n):
        nat = val[i * (seq + 1) : (i + 1) * (seq + 1)]
        L, a, b, _ = draw_copy(g, seq + 1, lo, hi)  # one repeat: the "S S" case
        rows.append(copy_row(nat, L, a, b))
        spans.append((L, b))
    return torch.stack(rows), spans
