"""Attention: F.scaled_dot_product_attention (lowered from
_scaled_dot_product_flash_attention_for_cpu and friends) against eager."""
import math

import pytest
import torch
import torch.nn.functional as F

import airgraph

from conftest import assert_close, check, compile_native

DTYPES = [torch.float32, torch.bfloat16]
aten = torch.ops.aten


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 4, 5, 8, 7), (1, 2, 1, 16, 33), (1, 1, 64, 32, 64)])
def test_sdpa_plain(dtype, shape):
    B, H, L, E, S = shape
    check(sdpa, r(B, H, L, E, dtype=dtype), r(B, H, S, E, dtype=dtype), r(B, H, S, E, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_zero_size(dtype):
    # empty query block and empty key set (every row fully masked -> 0, as eager), made inside the function
    check(lambda q, k, v: sdpa(q[:, :, :0], k, v), r(2, 3, 4, 8, dtype=dtype), r(2, 3, 5, 8, dtype=dtype),
          r(2, 3, 5, 8, dtype=dtype))
    got = check(lambda q, k, v: sdpa(q, k[:, :, :0], v[:, :, :0]), r(2, 3, 4, 8, dtype=dtype),
                r(2, 3, 5, 8, dtype=dtype), r(2, 3, 5, 8, dtype=dtype))
    assert got.shape == (2, 3, 4, 8) and (got == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L,S", [(5, 5), (5, 7), (9, 4), (1, 6)])
def test_sdpa_causal(dtype, L, S):
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
          r(2, 2, L, 8, dtype=dtype), r(2, 2, S, 8, dtype=dtype), r(2, 2, S, 8, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_gqa_and_scale(dtype, causal):
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3, enable_gqa=True),
          r(2, 6, 5, 8, dtype=dtype), r(2, 2, 7, 8, dtype=dtype), r(2, 2, 7, 8, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mshape", [(5, 7), (2, 1, 5, 7), (1, 4, 1, 7), (2, 4, 5, 7)])
def test_sdpa_float_mask(dtype, mshape):
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
          r(2, 4, 5, 8, dtype=dtype), r(2, 4, 7, 8, dtype=dtype), r(2, 4, 7, 8, dtype=dtype), r(*mshape, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_bool_mask_with_fully_masked_row(dtype):
    torch.manual_seed(0)
    m = torch.rand(5, 7) > 0.4
    m[2] = False  # a query that sees no key gives 0, as eager
    got = check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                r(2, 4, 5, 8, dtype=dtype), r(2, 4, 7, 8, dtype=dtype), r(2, 4, 7, 8, dtype=dtype), m)
    assert (got[:, :, 2] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("S", [8, 21, 40])
def test_sdpa_masks_over_vector_widths(dtype, S):
    """Key counts past the eight-lane score loop (8, a tail of 5, a tail of 0): additive masks with
    -inf and a fully masked row, bool masks with a row that sees no key, no mask, and a NaN query
    (its row NaN, the other rows as eager's)."""
    torch.manual_seed(1)
    q, k, v = r(2, 3, 6, 8, dtype=dtype), r(2, 3, S, 8, dtype=dtype), r(2, 3, S, 8, dtype=dtype)
    fm = r(2, 3, 6, S, dtype=dtype)
    fm[0, 1, 2, ::3] = float("-inf")
    fm[1, 0, 4] = float("-inf")  # every key masked: 0 out, as eager
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, fm)
    bm = torch.rand(6, S) > 0.3
    bm[3] = False
    got = check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, bm)
    assert (got[:, :, 3] == 0).all()
    # a NaN query: its row is NaN, never mistaken for a fully masked row (0). (Eager's own CPU
    # kernel is no reference here: it gives 0 for up to 8 keys and NaN beyond.)
    qn = q.clone()
    qn[1, 2, 0, 0] = float("nan")
    with torch.no_grad():
        got = torch.compile(sdpa, backend="airgraph")(qn, k, v)
    assert got[1, 2, 0].isnan().all(), got[1, 2, 0]
    want = sdpa(q, k, v)
    got[1, 2, 0] = want[1, 2, 0]
    assert_close(got, want, msg="sdpa with a NaN query, other rows")
    # the same in a decode step whose keys are split across threads (the partials' combine)
    qd, kd, vd = r(1, 1, 1, 8, dtype=dtype), r(1, 1, 3000, 8, dtype=dtype), r(1, 1, 3000, 8, dtype=dtype)
    qd[0, 0, 0, 3] = float("nan")
    with torch.no_grad():
        assert torch.compile(sdpa, backend="airgraph")(qd, kd, vd).isnan().all()


def test_sdpa_noncontiguous_and_permute_inside():
    # HF-style: [B, L, H, E] projections transposed to [B, H, L, E] inside the function
    def f(q, k, v):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True).transpose(1, 2)
    check(f, r(2, 6, 4, 8), r(2, 6, 4, 8), r(2, 6, 4, 8))
    q = r(1, 5, 2, 8).transpose(1, 2)  # non-contiguous graph input
    check(sdpa, q, r(1, 2, 5, 8), r(1, 2, 5, 8))


def test_sdpa_large_scores_stable():
    q = r(1, 1, 4, 8) * 100
    got = check(sdpa, q, r(1, 1, 6, 8) * 100, r(1, 1, 6, 8), atol=1e-4, rtol=1e-4)
    assert torch.isfinite(got).all()


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_chunked_batches(causal):
    # 1024x1024 scores per head: the GEMM path takes (batch, head) pairs in
    # chunks of 4 under its score budget, so 2x3 pairs run as a chunk of 4 and
    # a remainder of 2; a float mask per batch checks the chunk offsets
    q, k, v = r(2, 3, 1024, 16), r(2, 3, 1024, 16), r(2, 3, 1024, 8)
    mask = r(2, 1, 1024, 1024)
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=None if causal else m,
                                                            is_causal=causal), q, k, v, mask,
          atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sdpa_long_sequence_row_kernel(dtype):
    # 2100x2100 scores for one head exceed the score budget: the row kernel runs
    q, k, v = r(1, 1, 2100, 8, dtype=dtype), r(1, 1, 2100, 8, dtype=dtype), r(1, 1, 2100, 8, dtype=dtype)
    keep = torch.rand(1, 1, 2100, 2100) > 0.3
    keep[..., 7, :] = False  # a fully masked row gives 0
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, keep)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L,Hk", [(1, 4), (1, 2), (2, 4), (1, 1)])
def test_sdpa_decode_step_row_kernel(dtype, L, Hk):
    """A decode step (one or two query rows per head against a cache; G * L <= 4 query rows per key
    head) runs the row kernel, with GQA, an additive or bool mask, and causality."""
    H, S, E = 8, 37, 16
    q, k, v = r(2, H, L, E, dtype=dtype), r(2, Hk, S, E, dtype=dtype), r(2, Hk, S, E, dtype=dtype)
    add = torch.randn(2, 1, L, S, dtype=dtype)
    keep = torch.rand(2, 1, L, S) > 0.3
    keep[1, ..., :] = False  # a fully masked row gives 0
    gqa = dict(enable_gqa=True) if Hk != H else {}
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, **gqa), q, k, v, add)
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, **gqa), q, k, v, keep)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa), q, k, v)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("S", [1000, 3000])
@pytest.mark.parametrize("H,Hk,L,threads",
                         [(8, 2, 1, 5), (4, 2, 2, 5), (2, 2, 1, 2), (2, 2, 2, 3), (1, 1, 1, 2), (1, 1, 1, 4)])
def test_sdpa_decode_split_kv(dtype, S, H, Hk, L, threads):
    """A decode step with fewer query rows (B * H * L) than 2 per thread and a long cache: the row
    kernel splits each row's keys into ranges of 256 or more (split-KV) and combines their partial
    softmax sums. GQA or not, a bool mask per head (one head sees no key, one only the last keys:
    whole ranges masked), an additive float mask broadcast from [L, S], causality (top-left: all
    but the first range empty). More threads than the machine's processors (slots in the scratch)
    put the partials on the heap; fewer use the scratch."""
    from airgraph._core import C

    torch.manual_seed(0)
    E = 64
    q, k, v = r(1, H, L, E, dtype=dtype), r(1, Hk, S, E, dtype=dtype), r(1, Hk, S, E, dtype=dtype)
    keep = torch.rand(1, H, L, S) > 0.3
    keep[:, 0] = False  # a fully masked row gives 0
    keep[:, -1, :, :-100] = False  # only the last range sees keys
    add = torch.randn(L, S, dtype=dtype)
    gqa = dict(enable_gqa=True) if Hk != H else {}
    for fn, extra in [(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **gqa), ()),
                      (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, **gqa), (keep,)),
                      (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, **gqa), (add,)),
                      (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa), ())]:
        runs = C.sdpa_kv_split_runs()
        got = check(fn, q, k, v, *extra, num_threads=threads)
        assert C.sdpa_kv_split_runs() > runs, "the split path did not run"
        if extra and extra[0] is keep:
            assert (got[:, 0] == 0).all()


def _repeat_kv(x, n_rep):
    """transformers' repeat_kv: [B, Hk, S, E] -> [B, Hk * n_rep, S, E]."""
    B, Hk, S, E = x.shape
    return x[:, :, None, :, :].expand(B, Hk, n_rep, S, E).reshape(B, Hk * n_rep, S, E)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L,Hk,R", [(1, 2, 4), (6, 2, 3), (1, 1, 8), (3, 4, 1)])
def test_repeat_kv_is_read_in_place_by_gqa_attention(dtype, L, Hk, R):
    """transformers' repeat_kv before sdpa (every GQA decoder's attention with a mask) copies the
    KV cache R times per layer and step; the engine drops the copies and lets the attention kernel
    read key head h // R where it is. Same results as eager, and no expand left in the graph."""
    from airgraph.backend import collect_reports

    def attn(q, k, v, m):
        return F.scaled_dot_product_attention(q, _repeat_kv(k, R), _repeat_kv(v, R), attn_mask=m)

    S, E = 23, 16
    q, k, v = r(2, Hk * R, L, E, dtype=dtype), r(2, Hk, S, E, dtype=dtype), r(2, Hk, S, E, dtype=dtype)
    m = torch.rand(2, 1, L, S) > 0.2
    with collect_reports() as reps:
        check(attn, q, k, v, m)
    ops = [op for rep in reps for g in rep.graphs for _, op, _ in g.exe.instructions()]
    assert "sdpa" in ops and "expand" not in ops, ops


def _fallback_equal(fn, *args):
    torch._dynamo.reset()
    with torch.no_grad():
        want = fn(*args)
        got = torch.compile(fn, backend="airgraph", dynamic=False)(*args)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_logsumexp_use_falls_back():
    def f(q, k, v):
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
        return out, lse
    _fallback_equal(f, r(1, 2, 3, 8), r(1, 2, 5, 8), r(1, 2, 5, 8))


def test_dropout_falls_back():
    torch.manual_seed(0)
    q, k, v = r(1, 2, 3, 8), r(1, 2, 5, 8), r(1, 2, 5, 8)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=1.0)  # all dropped: deterministic zeros
    _fallback_equal(f, q, k, v)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("S", [37, 3000])
def test_sdpa_decode_reads_only_the_keys_a_bool_mask_keeps(dtype, S):
    """Sequences of their own lengths in one decode batch: a static KV cache of S slots, sequence b
    left-padded by pad[b] and filled up to fill[b] (bool mask: keys [pad, fill) kept, one dropped key
    inside). The row kernel reads keys [pad, fill) only (split or not), and matches eager."""
    from airgraph._core import C

    torch.manual_seed(3)
    B, H, Hk, E = 3, 4, 2, 16
    q, k, v = r(B, H, 1, E, dtype=dtype), r(B, Hk, S, E, dtype=dtype), r(B, Hk, S, E, dtype=dtype)
    pad, fill = [0, S // 5, 3], [S // 2, S - 1, S // 3]
    keep = torch.zeros(B, 1, 1, S, dtype=torch.bool)
    for b in range(B):
        keep[b, ..., pad[b]:fill[b]] = True
    keep[1, ..., pad[1] + 1] = False  # a hole inside the kept range is still masked
    skipped = C.sdpa_keys_skipped()
    f = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)  # noqa: E731
    check(f, q, k, v, keep)  # (torch turns the bool mask into 0 / -inf)
    want = sum(H * (S - (fill[b] - pad[b])) for b in range(B))
    assert C.sdpa_keys_skipped() - skipped >= want, (C.sdpa_keys_skipped() - skipped, want)
    # slots past a sequence's fill are never read: garbage there (NaN) does not reach the output
    # (eager adds -inf to NaN scores and gives NaN rows: documented in the README's Known limits)
    k2 = k.clone()
    k2[0, :, fill[0]:] = float("nan")
    with torch.no_grad():
        got = torch.compile(f, backend="airgraph")(q, k2, v, keep)
    assert_close(got, f(q, k, v, keep), msg="NaN in slots the mask drops")


def _cache_mask(B, L, S, pad, fill, kind, dtype, heads=1):
    """A static KV cache's mask [B, heads, L, S]: sequence b left-padded by pad[b] slots (head h: pad[b] + h % 3
    more), its query i at slot fill[b] - L + i, so keeping keys [pad, fill[b] - L + i + 1); bool, or additive
    (random finite values where kept, -inf where dropped)."""
    keep = torch.zeros(B, heads, L, S, dtype=torch.bool)
    for b in range(B):
        for h in range(heads):
            for i in range(L):
                keep[b, h, i, pad[b] + h % 3:fill[b] - L + i + 1] = True
    if kind == "bool":
        return keep
    return torch.randn(B, heads, L, S, dtype=dtype).masked_fill(~keep, float("-inf"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("B,L", [(1, 1), (3, 1), (2, 5), (3, 5)])
def test_sdpa_gqa_gemm_reads_only_the_keys_a_mask_keeps(dtype, kind, B, L):
    """GQA decode (L=1) and a short prefill (L=5) over a static KV cache, Qwen2-0.5B's heads (14 query heads on 2
    key heads: 7 * L query rows per key head, the GEMM path): sequences left-padded and filled to their own
    lengths, one query that sees no key (0, as eager). The GEMMs read only the keys some row keeps (the union
    of the rows' ranges): matches eager, counts the keys not read per query row, and garbage (NaN) in the slots
    past every sequence's fill never reaches the output."""
    from airgraph._core import C

    torch.manual_seed(4)
    H, Hk, S, E = 14, 2, 300, 64
    pad, fill = [0, 40, 7][:B], [100, 180, 61][:B]
    q, k, v = r(B, H, L, E, dtype=dtype), r(B, Hk, S, E, dtype=dtype), r(B, Hk, S, E, dtype=dtype)
    m = _cache_mask(B, L, S, pad, fill, kind, dtype)
    if B > 1:
        m[1, :, 0] = False if kind == "bool" else float("-inf")
    f = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)  # noqa: E731
    skipped = C.sdpa_keys_skipped()
    got = check(f, q, k, v, m)
    want = B * H * L * (S - (max(fill) - min(pad)))
    assert C.sdpa_keys_skipped() - skipped >= want, (C.sdpa_keys_skipped() - skipped, want)
    if B > 1:
        assert (got[1, :, 0] == 0).all()
    k2, v2 = k.clone(), v.clone()
    k2[:, :, max(fill):] = float("nan")
    v2[:, :, max(fill):] = float("nan")
    with torch.no_grad():
        got = torch.compile(f, backend="airgraph")(q, k2, v2, m)
    assert_close(got, f(q, k, v, m), msg="NaN in slots no row keeps")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_gqa_gemm_key_range_with_causality(dtype, kind):
    """A mask and is_causal together on the GEMM path (top-left: row i keeps keys j <= i as well): the rows keep
    keys [pad, i + 1) (the first ones none), so the GEMMs read keys from 2 and the causal bound counts from
    there."""
    torch.manual_seed(5)
    B, H, Hk, L, S, E = 2, 14, 2, 5, 300, 64
    q, k, v = r(B, H, L, E, dtype=dtype), r(B, Hk, S, E, dtype=dtype), r(B, Hk, S, E, dtype=dtype)
    m = _cache_mask(B, L, S, [2, 3], [250, 250], kind, dtype)
    got = check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=True,
                                                                  enable_gqa=True), q, k, v, m)
    assert (got[:, :, :2] == 0).all()  # rows 0 and 1 keep no key


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_gqa_gemm_whole_key_range(dtype, kind):
    """A mask whose rows together keep keys over (nearly) all the cache on the GEMM path: the GEMMs read all S keys
    (none counted as skipped) and match eager; a mask that keeps no key at all gives 0, as eager."""
    from airgraph._core import C

    torch.manual_seed(6)
    B, H, Hk, L, S, E = 2, 14, 2, 5, 300, 64
    q, k, v = r(B, H, L, E, dtype=dtype), r(B, Hk, S, E, dtype=dtype), r(B, Hk, S, E, dtype=dtype)
    f = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)  # noqa: E731
    for pad, fill in [([0, 3], [300, 280]), ([0, 60], [226, 286])]:
        skipped = C.sdpa_keys_skipped()
        check(f, q, k, v, _cache_mask(B, L, S, pad, fill, kind, dtype))
        assert C.sdpa_keys_skipped() == skipped
    none = torch.zeros(B, 1, L, S, dtype=torch.bool)
    if kind == "float":
        none = torch.zeros(B, 1, L, S, dtype=dtype).masked_fill(~none, float("-inf"))
    skipped = C.sdpa_keys_skipped()
    assert check(f, q, k, v, none).eq(0).all()
    assert C.sdpa_keys_skipped() - skipped >= B * H * L * S


@pytest.mark.parametrize("L,S,path", [(200, 1100, "tiles"), (15, 14000, "gemm")])
def test_sdpa_gqa_key_range_per_chunk_or_tile(L, S, path, engine_graphs):
    """A mask per head (GQA, 21 query heads on 3 key heads): each head's rows keep their own key range, and the
    keys outside it are not read. 200 query rows a head against 1100 keys run as tiles (a tile reads its rows'
    range); 15 query rows a head against 14000 keys (7 * 15 stacked rows per key head) run the GEMM path, its
    3 (batch, key head) pairs in a chunk of 2 and a remainder of 1, each chunk reading its rows' union. Then
    the first heads' rows keep every key and only the others' ranges are cut."""
    from airgraph._core import C

    torch.manual_seed(7)
    H, Hk, E = 21, 3, 64
    q, k, v = r(1, H, L, E), r(1, Hk, S, E), r(1, Hk, S, E)
    keep = torch.zeros(1, H, L, S, dtype=torch.bool)
    keep[:, 0:7, :, 100:300] = True
    keep[:, 7:14, :, 50:500] = True
    keep[:, 14:21, :, 700:900] = True
    keep[:, 3, 9] = False  # a row that sees no key
    f = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)  # noqa: E731
    skipped = C.sdpa_keys_skipped()
    check(f, q, k, v, keep)
    assert C.sdpa_keys_skipped() - skipped >= 14 * L * (S - 450) + 7 * L * (S - 200)
    kernels = [k for g in engine_graphs for _, _, k in g.exe.instructions()]
    assert sum(k.startswith(f"sdpa_{path}_") for k in kernels) == 1, kernels
    keep[:, 7:14, :, :] = True
    skipped = C.sdpa_keys_skipped()
    check(f, q, k, v, keep)
    assert C.sdpa_keys_skipped() - skipped >= 7 * L * (S - 200)


class HeadSplitAttention(torch.nn.Module):
    """Self-attention as transformers writes it: projections viewed as [B, L, H, E] and transposed to
    [B, H, L, E] for sdpa, the output transposed back and reshaped to [B, L, H * E]."""

    def __init__(self, width=96, heads=6, kv_heads=6, causal=False):
        super().__init__()
        self.h, self.hk, self.e, self.causal = heads, kv_heads, width // heads, causal
        self.q = torch.nn.Linear(width, width)
        self.kv = torch.nn.Linear(width, 2 * kv_heads * self.e)
        self.o = torch.nn.Linear(width, width)

    def forward(self, x, mask):
        B, L, _ = x.shape
        q = self.q(x).view(B, L, self.h, self.e).transpose(1, 2)
        k, v = self.kv(x).split(self.hk * self.e, dim=-1)
        k = k.view(B, L, self.hk, self.e).transpose(1, 2)
        v = v.reshape(B, L, self.hk, self.e).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=None if self.causal else mask,
                                           is_causal=self.causal, enable_gqa=self.hk != self.h)
        return self.o(a.transpose(1, 2).reshape(B, L, self.h * self.e))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L,path", [(7, "short"), (40, "short"), (150, "gemm"), (600, "tiles")])
@pytest.mark.parametrize("kv_heads,causal", [(6, False), (2, True)])
def test_head_split_and_merge_copy_nothing(dtype, L, path, kv_heads, causal, engine_graphs):
    """The transposes around attention (head split and merge) are folded into the sdpa kernel
    (attention_permutes): no permute copy is left in the program, the short sequences run the
    one-kernel path, longer ones the GEMMs, the longest the tiles (600 rows: two tiles of 256 query
    rows and one of 88, each reading the keys its rows keep), and the results are eager's, with a
    padding mask (bool, batch 2, the second sequence shorter) or causal with grouped-query heads."""
    torch.manual_seed(0)
    m = HeadSplitAttention(kv_heads=kv_heads, causal=causal).to(dtype).eval()
    x = r(2, L, 96, dtype=dtype)
    keep = torch.ones(2, 1, 1, L, dtype=torch.bool)
    keep[1, ..., L - 3:] = False
    with torch.no_grad():
        want = m(x, keep)
        got = torch.compile(m, backend=airgraph.get_backend(airgraph.CompilerConfig(fallback=False)))(x, keep)
    assert_close(got, want, None, None, msg="attention")
    kernels = [k for g in engine_graphs for _, _, k in g.exe.instructions()]
    assert not any("permute" in k for k in kernels), kernels
    from airgraph._core import C
    if path == "short" and L > C.sdpa_short_max_keys():  # (fewer keys without AVX-512)
        path = "gemm"
    assert sum(k.startswith(f"sdpa_{path}_") for k in kernels) == 1, kernels
