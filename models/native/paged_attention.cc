// Fused paged-attention decode for XLA:CPU (typed FFI), the native half of
// models/inference/paged_attention.py, which builds, loads and documents it.
//
// One query token per slot attends over the slot's cached keys read in place
// through its page table: no [S, M*p, K, d] copy of the pages. Per slot s and
// kv head k (the G = H / K query heads of k share each key row):
//   scores[g][n] = q[s, k*G + g] . key(n)    for every key n with k_pos[s, n] <= pos[s]
//   p = exp(scores - max) / sum(...)         (fp32; masked keys contribute exactly 0)
//   out[s, k*G + g] = sum_n p[g][n] * value(n)
// Keys and values are read as float32 from float32, bfloat16 or int8 (times the
// row's float32 scale) pages; round_bf16 rounds them to bfloat16 first, as the
// gather path's cast to a bfloat16 compute dtype does.
//
// Shapes: q [S, H, d] f32 (pre-scaled by the caller); k, v [L, P, p, K, d];
// k_scale, v_scale [L, P, p, K] f32 (int8 only; any f32 otherwise);
// page_table [S, M] s32; k_pos [S, M*p] s32; pos [S] s32; layer [] s32;
// out [S, H, d] f32. Page and layer indices are clipped like jnp.take(mode="clip").

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kLanes = 16;  // independent accumulators: one AVX-512 register of floats

// exp for x <= 0 (Cephes expf's range reduction and polynomial): at most 1.02 ulp from the
// exact value on every float in [-87, 0] (checked exhaustively against double exp).
// Branch-free so a loop over it vectorises; below -87 it returns 0 (fp32 exp underflows).
inline float ExpNonPositive(float x) {
  const bool tiny = x < -87.0f;
  x = std::max(x, -87.0f);
  const float n = std::nearbyint(x * 1.44269504088896341f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return tiny ? 0.0f : y * scale;
}

inline float RoundToBf16(float x) {  // round to nearest even, as XLA's f32 -> bf16 convert
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  b = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&x, &b, sizeof(x));
  return x;
}

inline float Bf16ToF32(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
}

// Dot product with kLanes independent partial sums, then a fixed pairwise tree.
inline float Dot(const float* a, const float* b, int64_t d) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  for (int l = 0; i < d; ++i, ++l) acc[l] += a[i] * b[i];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

struct Cache {  // one of k / v: raw pages, their dtype and (int8) row scales
  const void* data;
  ffi::DataType type;
  const float* scale;
};

// Row (layer, page, j, kv head) of `c` as float32: in place for unrounded float32 pages,
// else converted into buf[d].
inline const float* LoadRow(const Cache& c, int64_t row, int64_t d, bool round_bf16,
                            float* buf) {
  const int64_t base = row * d;
  switch (c.type) {
    case ffi::DataType::F32: {
      const float* x = static_cast<const float*>(c.data) + base;
      if (!round_bf16) return x;
      for (int64_t i = 0; i < d; ++i) buf[i] = RoundToBf16(x[i]);
      return buf;
    }
    case ffi::DataType::BF16: {  // already bfloat16: rounding is the identity
      const uint16_t* x = static_cast<const uint16_t*>(c.data) + base;
      for (int64_t i = 0; i < d; ++i) buf[i] = Bf16ToF32(x[i]);
      return buf;
    }
    default: {  // S8, checked by the handler
      const int8_t* x = static_cast<const int8_t*>(c.data) + base;
      // The gather path casts values and scale to the compute dtype, then multiplies there.
      const float s = round_bf16 ? RoundToBf16(c.scale[row]) : c.scale[row];
      for (int64_t i = 0; i < d; ++i) buf[i] = static_cast<float>(x[i]) * s;
      if (round_bf16)
        for (int64_t i = 0; i < d; ++i) buf[i] = RoundToBf16(buf[i]);
      return buf;
    }
  }
}

struct Problem {
  const float* q;
  Cache k, v;
  const int32_t* table;
  const int32_t* k_pos;
  const int32_t* pos;
  float* out;
  int64_t S, H, K, d, M, p, P, layer;
  bool round_bf16;
};

// Slots [s0, s1): everything one worker does.
void AttendSlots(const Problem& pr, int64_t s0, int64_t s1) {
  const int64_t G = pr.H / pr.K, N = pr.M * pr.p, d = pr.d;
  std::vector<int64_t> rows(N);          // cache row of each visible key (kv head 0)
  std::vector<float> scores(G * N), row(d);
  for (int64_t s = s0; s < s1; ++s) {
    int64_t n_vis = 0;
    for (int64_t n = 0; n < N; ++n) {
      if (pr.k_pos[s * N + n] > pr.pos[s]) continue;
      const int64_t page = std::clamp<int64_t>(pr.table[s * pr.M + n / pr.p], 0, pr.P - 1);
      rows[n_vis++] = ((pr.layer * pr.P + page) * pr.p + n % pr.p) * pr.K;
    }
    float* out_s = pr.out + s * pr.H * d;
    if (n_vis == 0) {  // no visible key (never in decode: the slot's own key is cached)
      std::fill(out_s, out_s + pr.H * d, 0.0f);
      continue;
    }
    for (int64_t kh = 0; kh < pr.K; ++kh) {
      const float* q_k = pr.q + (s * pr.H + kh * G) * d;
      for (int64_t i = 0; i < n_vis; ++i) {
        const float* key = LoadRow(pr.k, rows[i] + kh, d, pr.round_bf16, row.data());
        for (int64_t g = 0; g < G; ++g) scores[g * N + i] = Dot(q_k + g * d, key, d);
      }
      for (int64_t g = 0; g < G; ++g) {
        float* sc = scores.data() + g * N;
        const float m = *std::max_element(sc, sc + n_vis);
        float denom = 0.0f;
        for (int64_t i = 0; i < n_vis; ++i) sc[i] = ExpNonPositive(sc[i] - m);
        for (int64_t i = 0; i < n_vis; ++i) denom += sc[i];
        for (int64_t i = 0; i < n_vis; ++i) sc[i] /= denom;  // softmax normalises, then p.v
      }
      float* o_k = out_s + kh * G * d;
      std::fill(o_k, o_k + G * d, 0.0f);
      for (int64_t i = 0; i < n_vis; ++i) {
        const float* value = LoadRow(pr.v, rows[i] + kh, d, pr.round_bf16, row.data());
        for (int64_t g = 0; g < G; ++g) {
          const float w = scores[g * N + i];
          float* o = o_k + g * d;
          for (int64_t j = 0; j < d; ++j) o[j] += w * value[j];
        }
      }
    }
  }
}

ffi::Error PagedDecodeImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::AnyBuffer k,
                           ffi::AnyBuffer v, ffi::Buffer<ffi::F32> k_scale,
                           ffi::Buffer<ffi::F32> v_scale, ffi::Buffer<ffi::S32> table,
                           ffi::Buffer<ffi::S32> k_pos, ffi::Buffer<ffi::S32> pos,
                           ffi::Buffer<ffi::S32> layer, ffi::ResultBuffer<ffi::F32> out,
                           bool round_bf16, int64_t threads) {
  const auto qd = q.dimensions(), kd = k.dimensions();
  if (qd.size() != 3 || kd.size() != 5 || table.dimensions().size() != 2)
    return ffi::Error::InvalidArgument("paged_decode: q [S,H,d], k/v [L,P,p,K,d], table [S,M]");
  const ffi::DataType type = k.element_type();
  if (v.element_type() != type ||
      (type != ffi::DataType::F32 && type != ffi::DataType::BF16 && type != ffi::DataType::S8))
    return ffi::Error::InvalidArgument("paged_decode: k/v must both be f32, bf16 or s8");
  if (qd[1] % kd[3] != 0 || qd[2] != kd[4])
    return ffi::Error::InvalidArgument("paged_decode: H % K != 0 or head dims differ");
  const auto td = table.dimensions(), kpd = k_pos.dimensions(), pd = pos.dimensions();
  if (td[0] != qd[0] || kpd.size() != 2 || kpd[0] != qd[0] || kpd[1] != td[1] * kd[2] ||
      pd.size() != 1 || pd[0] != qd[0] || layer.element_count() != 1)
    return ffi::Error::InvalidArgument("paged_decode: table [S,M], k_pos [S,M*p], pos [S], layer []");
  if (type == ffi::DataType::S8)
    for (auto sd : {k_scale.dimensions(), v_scale.dimensions()})
      if (sd.size() != 4 || !std::equal(sd.begin(), sd.end(), kd.begin()))
        return ffi::Error::InvalidArgument("paged_decode: int8 scales must be [L,P,p,K]");
  Problem pr;
  pr.S = qd[0], pr.H = qd[1], pr.d = qd[2];
  pr.P = kd[1], pr.p = kd[2], pr.K = kd[3], pr.M = table.dimensions()[1];
  pr.layer = std::clamp<int64_t>(layer.typed_data()[0], 0, kd[0] - 1);
  pr.q = q.typed_data();
  pr.k = Cache{k.untyped_data(), type, k_scale.typed_data()};
  pr.v = Cache{v.untyped_data(), type, v_scale.typed_data()};
  pr.table = table.typed_data(), pr.k_pos = k_pos.typed_data(), pr.pos = pos.typed_data();
  pr.out = out->typed_data();
  pr.round_bf16 = round_bf16 && type != ffi::DataType::BF16;
  if (threads <= 1 || pr.S <= 1) {
    AttendSlots(pr, 0, pr.S);
    return ffi::Error::Success();
  }
  // Workers claim one slot at a time; this thread works too and claims whatever the pool has
  // not started, so it only ever waits for slots in progress (no deadlock when the pool is
  // busy or is this thread's own). A late task finds nothing left and touches no buffer.
  struct Shared {
    Problem pr;
    std::atomic<int64_t> next{0}, finished{0};
    std::mutex mu;
    std::condition_variable done;
  };
  auto sh = std::make_shared<Shared>();
  sh->pr = pr;
  auto work = [sh] {
    for (int64_t s; (s = sh->next.fetch_add(1)) < sh->pr.S;) {
      AttendSlots(sh->pr, s, s + 1);
      if (sh->finished.fetch_add(1) + 1 == sh->pr.S) {
        std::lock_guard<std::mutex> lock(sh->mu);
        sh->done.notify_all();
      }
    }
  };
  for (int64_t t = 1; t < std::min(threads, pr.S); ++t) pool.Schedule(std::function<void()>(work));
  work();
  std::unique_lock<std::mutex> lock(sh->mu);
  sh->done.wait(lock, [&] { return sh->finished.load() == sh->pr.S; });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(AgentrlPagedDecode, PagedDecodeImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // q
                                  .Arg<ffi::AnyBuffer>()         // k pages
                                  .Arg<ffi::AnyBuffer>()         // v pages
                                  .Arg<ffi::Buffer<ffi::F32>>()  // k scales
                                  .Arg<ffi::Buffer<ffi::F32>>()  // v scales
                                  .Arg<ffi::Buffer<ffi::S32>>()  // page table
                                  .Arg<ffi::Buffer<ffi::S32>>()  // key positions
                                  .Arg<ffi::Buffer<ffi::S32>>()  // query positions
                                  .Arg<ffi::Buffer<ffi::S32>>()  // layer
                                  .Ret<ffi::Buffer<ffi::F32>>()  // out
                                  .Attr<bool>("round_bf16")
                                  .Attr<int64_t>("threads"));
