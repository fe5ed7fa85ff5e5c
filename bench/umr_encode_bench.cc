// umr_encode_bench: how fast umr/ turns a request into WQE bytes in a send ring.
//
// Ours: BuildMapKey (4 inline KLMs, DS 12, 3 WQEBBs) and BuildLocalInvalidate (DS 8, 2 WQEBBs)
// written into a 64-WQEBB ring through SqRing (fence/signal policy, ring-wrap through scratch),
// exactly as the UMR engine posts. Anchor, measured in the same run: the same WQEs produced the
// way rdma-core's mlx5 provider does it (providers/mlx5/qp.c style: fill mlx5dv.h structs in
// place with mlx5dv_set_ctrl_seg / mlx5dv_set_data_seg, wrapping the segment pointer at the
// ring end). items_per_second = WQEs/s on one core; target >= 20 M/s.
#include <infiniband/mlx5dv.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "umr/mkey.h"
#include "umr/sq.h"
#include "umr/wqe_builder.h"

namespace {

constexpr uint32_t kRingWqebbs = 64;

regcache::umr::MapKeyRequest Klm4() {
  regcache::umr::MapKeyRequest r;
  r.key = 0x00012307;
  r.access = {true, true, true, true, false};
  r.start_addr = 0x7f0000000000;
  r.length = 4 * 65536;
  for (uint32_t i = 0; i < 4; ++i) r.klm.push_back({65536, 0x500 + i, 0x10000000 + i * 65536ull});
  return r;
}

void BM_EncodeMapKlm4(benchmark::State& state) {
  std::vector<uint8_t> ring(kRingWqebbs * regcache::umr::kWqebb);
  auto sq = regcache::umr::SqRing::Create(absl::MakeSpan(ring), {});
  regcache::umr::MapKeyRequest r = Klm4();
  for (auto _ : state) {
    r.key = regcache::umr::NextVariant(r.key);  // a new variant each time
    const regcache::umr::WqeHeader h = sq->NextHeader(true, false, false, 3);
    auto buf = sq->Begin(sq->producer(), 3);  // the engine's consumer keeps up
    auto size = regcache::umr::BuildMapKey(h, r, 4, *buf);
    auto posted = sq->Commit(*size, h, true);
    benchmark::DoNotOptimize(posted);
  }
  benchmark::ClobberMemory();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EncodeMapKlm4);

void BM_EncodeLocalInvalidate(benchmark::State& state) {
  std::vector<uint8_t> ring(kRingWqebbs * regcache::umr::kWqebb);
  auto sq = regcache::umr::SqRing::Create(absl::MakeSpan(ring), {});
  regcache::umr::LocalInvalidateRequest r{0x00012300};
  for (auto _ : state) {
    r.key += 0x100;
    const regcache::umr::WqeHeader h = sq->NextHeader(true, false, false, 2);
    auto buf = sq->Begin(sq->producer(), 2);
    auto size = regcache::umr::BuildLocalInvalidate(h, r, *buf);
    auto posted = sq->Commit(*size, h, true);
    benchmark::DoNotOptimize(posted);
  }
  benchmark::ClobberMemory();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EncodeLocalInvalidate);

// ---- Anchor: rdma-core provider style ---------------------------------------------------------
struct RdmaCoreStyleSq {
  std::vector<uint8_t> buf = std::vector<uint8_t>(kRingWqebbs * MLX5_SEND_WQE_BB);
  uint32_t cur_post = 0;
  uint8_t fm_ce_se = 0;
  void* Wqe(uint32_t idx) { return buf.data() + (idx & (kRingWqebbs - 1)) * MLX5_SEND_WQE_BB; }
  void* qend() { return buf.data() + buf.size(); }
  // The provider advances segment pointers and wraps them at qend (qp.c).
  template <typename T>
  T* Next(void* seg) {
    auto* p = static_cast<uint8_t*>(seg);
    return reinterpret_cast<T*>(p == qend() ? buf.data() : p);
  }
};

void BM_RdmaCoreStyleMapKlm4(benchmark::State& state) {
  RdmaCoreStyleSq sq;
  const regcache::umr::MapKeyRequest r0 = Klm4();
  uint32_t key = r0.key;
  for (auto _ : state) {
    key = (key & 0xffffff00) | ((key + 1) & 0xff);
    auto* ctrl = static_cast<mlx5_wqe_ctrl_seg*>(sq.Wqe(sq.cur_post));
    mlx5dv_set_ctrl_seg(ctrl, sq.cur_post & 0xffff, MLX5_OPCODE_UMR, 0, 0, sq.fm_ce_se, 12, 0,
                        htobe32(key));
    auto* u = sq.Next<mlx5_wqe_umr_ctrl_seg>(ctrl + 1);
    std::memset(u, 0, sizeof(*u));
    u->flags = MLX5_WQE_UMR_CTRL_FLAG_INLINE | MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE;
    u->klm_octowords = htobe16(4);
    u->mkey_mask =
        htobe64(MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN | MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR |
                (1ull << 8) | (1ull << 17) | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE |
                MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC);
    auto* mkc = sq.Next<mlx5_wqe_mkey_context_seg>(u + 1);
    std::memset(mkc, 0, sizeof(*mkc));
    mkc->access_flags = 0x80 | MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE |
                        MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ |
                        MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE |
                        MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ | 2;
    mkc->qpn_mkey = htobe32(0xffffff00 | (key & 0xff));
    mkc->start_addr = htobe64(r0.start_addr);
    mkc->len = htobe64(r0.length);
    auto* klm = sq.Next<mlx5_wqe_data_seg>(mkc + 1);
    for (const regcache::umr::KlmEntry& e : r0.klm)
      mlx5dv_set_data_seg(klm++, e.byte_count, e.mkey, e.address);
    sq.cur_post += 3;
    sq.fm_ce_se = MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE;  // next WQE after a UMR
    benchmark::DoNotOptimize(ctrl);
  }
  benchmark::ClobberMemory();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RdmaCoreStyleMapKlm4);

void BM_RdmaCoreStyleLocalInvalidate(benchmark::State& state) {
  RdmaCoreStyleSq sq;
  uint32_t key = 0x00012300;
  for (auto _ : state) {
    key += 0x100;
    auto* ctrl = static_cast<mlx5_wqe_ctrl_seg*>(sq.Wqe(sq.cur_post));
    mlx5dv_set_ctrl_seg(ctrl, sq.cur_post & 0xffff, MLX5_OPCODE_UMR, 0, 0, sq.fm_ce_se, 8, 0,
                        htobe32(key));
    auto* u = sq.Next<mlx5_wqe_umr_ctrl_seg>(ctrl + 1);
    std::memset(u, 0, sizeof(*u));
    u->flags = MLX5_WQE_UMR_CTRL_FLAG_INLINE;
    u->mkey_mask = htobe64(MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE);
    auto* mkc = sq.Next<mlx5_wqe_mkey_context_seg>(u + 1);
    std::memset(mkc, 0, sizeof(*mkc));
    mkc->free = MLX5_WQE_MKEY_CONTEXT_FREE;
    mkc->qpn_mkey = htobe32(0xffffff00);
    sq.cur_post += 2;
    sq.fm_ce_se = MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE;
    benchmark::DoNotOptimize(ctrl);
  }
  benchmark::ClobberMemory();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RdmaCoreStyleLocalInvalidate);

// Console output plus a record of each benchmark's WQEs/s for the summary.
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      auto it = r.counters.find("items_per_second");
      if (it != r.counters.end()) rate_[r.benchmark_name()] = it->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  double Rate(const std::string& name) const {
    auto it = rate_.find(name);
    return it == rate_.end() ? 0 : it->second;
  }

 private:
  std::map<std::string, double> rate_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  constexpr double kTarget = 20e6;
  std::printf("\nsummary (WQEs/s per core; anchor = same WQE filled rdma-core provider style):\n");
  for (const char* op : {"MapKlm4", "LocalInvalidate"}) {
    const double ours = reporter.Rate(std::string("BM_Encode") + op);
    const double anchor = reporter.Rate(std::string("BM_RdmaCoreStyle") + op);
    if (ours == 0 || anchor == 0) continue;
    std::printf(
        "  %-16s ours %7.1f M/s  anchor %7.1f M/s  ratio ours/anchor %.2f  target 20 M/s %s\n", op,
        ours / 1e6, anchor / 1e6, ours / anchor, ours >= kTarget ? "met" : "MISSED");
  }
  benchmark::Shutdown();
  return 0;
}
