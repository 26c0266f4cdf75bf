// The cuda backend (cuda_backend.h): CUDA C++ printed for every suite kernel and compiled by
// nvcc for sm_80 and sm_90 on any machine with the toolkit; run and verified only where a GPU
// is present (none: a clear "no device" result). Labelled "cuda".
#include "backends/cuda_backend.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "optimizer/optimizer.h"
#include "support/scaled_kernels.h"
#include "support/skip.h"
#include "transforms/registry.h"
#include "util/process.h"

using namespace perfdojo;

TEST_SUITE("cuda") {
  TEST_CASE(
      "every suite kernel's CUDA compiles with nvcc for sm_80 and sm_90, as written and "
      "transformed") {
    const std::string nvcc = backends::find_nvcc();
    if (nvcc.empty())
      PERFDOJO_SKIP("no nvcc (the CUDA toolkit at /usr/local/cuda, or PERFDOJO_NVCC)");
    const auto target = transforms::target_by_name("cuda");
    REQUIRE(target);
    std::string unit;
    int units = 0, parallel_launches = 0;
    for (const auto& name : testing::suite_kernel_names()) {
      auto p = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/" + name + ".pdj");
      REQUIRE_MESSAGE(p.ok(), p.error_text());
      // As written, and after a seeded random legal trajectory on the cuda target (which
      // parallelises). A step whose code would pass kMaxUnitBytes ends the trajectory: nvcc's
      // time grows with the code, not with what it checks (one 570 KiB group-norm unroll took
      // 136 s of cicc, 90% of the whole compile, and taught nothing the small units do not).
      constexpr size_t kMaxUnitBytes = 48 * 1024;
      ir::Program cur = p.value();
      std::mt19937_64 rng(std::hash<std::string>{}(name));
      for (int s = 0; s < 12; ++s) {
        auto a = transforms::sample_legal_action(cur, *target, rng);
        if (!a) break;
        auto next = transforms::apply(cur, *a, *target);
        REQUIRE(next.ok());
        if (backends::cuda_generate(next.value(), "probe").source.size() > kMaxUnitBytes) break;
        cur = std::move(next).value();
      }
      for (const ir::Program* q : {&p.value(), &cur}) {
        auto g = backends::cuda_generate(*q, "k" + std::to_string(units++));
        for (size_t at = g.source.find(", 256>>>"); at != std::string::npos;
             at = g.source.find(", 256>>>", at + 1))
          ++parallel_launches;
        unit += g.source + "\n";
      }
    }
    const std::string dir =
        std::filesystem::temp_directory_path() / ("perfdojo-cuda-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/all.cu") << unit;
    util::ProcessOptions po;
    po.timeout_s = 600;
    auto r =
        // One device front end (cicc, ~85% of the time) for compute_80, and ptxas's machine code
        // for both sm_80 and sm_90 from it: both architectures' code checked for half the time of
        // two front-end runs. The device passes at -O1: the same front end and code generator
        // run (what this test checks is that they accept the code), in 15 s instead of 36.
        util::run_process({nvcc, "-c", "-O3", "-Xcicc", "-O1", "-Xptxas", "-O1", "-std=c++17", "-w",
                           "-x", "cu", "-gencode", "arch=compute_80,code=[sm_80,sm_90]",
                           dir + "/all.cu", "-o", dir + "/all.o"},
                          po);
    CHECK_MESSAGE(r.ok(), r.output.substr(0, 3000));
    MESSAGE(units << " CUDA units (" << unit.size() / 1024 << " KiB) compiled for sm_80 and sm_90; "
                  << parallel_launches << " launches over many threads");
    CHECK(parallel_launches > 10);  // the transformed kernels use the grid, not one thread
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("the cuda backend compiles, then runs where a GPU is, else says there is none") {
    if (backends::find_nvcc().empty()) PERFDOJO_SKIP("no nvcc");
    auto b = backends::make_backend("cuda");
    REQUIRE(b);
    CHECK(b->available().ok);
    CHECK(b->capabilities().parallel);
    CHECK(b->capabilities().vector_widths.empty());
    auto p = testing::load_scaled_kernel("softmax");
    REQUIRE(p.ok());
    backends::MeasureOptions o;
    o.timeout_s = 120;
    auto m = b->measure(p.value(), o);
    REQUIRE_MESSAGE(m.ok(), m.error.value_or(""));
    CHECK(m.median_s > 0);  // the a100 model's estimate
    if (m.no_device) {
      CHECK_FALSE(m.verified);
      CHECK(m.flags.find("not run") != std::string::npos);
      MESSAGE("no GPU here: " << m.flags);
    } else {
      CHECK_MESSAGE(m.verified, "ran on a GPU but was not verified: ", m.flags);
    }
    // A program that does not compile is an error naming nvcc, never a crash.
    backends::BackendConfig c;
    c.cuda_arch = "sm_1";
    auto bad = backends::make_backend("cuda", c)->measure(p.value(), o);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error->find("nvcc") != std::string::npos);
  }

  TEST_CASE("the optimiser and the env run on the a100 model without a GPU") {
    if (backends::find_nvcc().empty()) PERFDOJO_SKIP("no nvcc");
    auto p = ir::load_file(std::string(PERFDOJO_KERNEL_DIR) + "/matmul-256.pdj");
    REQUIRE(p.ok());
    backends::BackendConfig c;
    c.calibrate = false;
    // A fixed amount of model work: the search ends after it instead of filling the 30 s.
    c.max_evaluations = 100;
    auto opt = optimizer::Optimizer::make("cuda", optimizer::Mode::kBalanced, c);
    REQUIRE_MESSAGE(opt.ok(), opt.error_text());
    // A proposal is measured first (anytime search): the test does not depend on how far the
    // search gets while nvcc takes ~3 s per compile on a busy machine.
    auto proposal = transforms::parse_trace("parallelize 0\n");
    REQUIRE(proposal.ok());
    opt.value()->add_proposals({proposal.value()});
    auto res = opt.value()->transform(p.value(), 30);
    CHECK(res.report.modelled);
    CHECK(res.report.verified);
    CHECK_MESSAGE(res.report.speedup > 10, res.report.speedup);  // a grid beats one thread
    CHECK(res.c_source.find("__global__") != std::string::npos);
    CHECK(ir::print_program(res.program).find(":par") != std::string::npos);
    MESSAGE("matmul-256 on the a100 model: x" << res.report.speedup << ", " << res.report.note);
    // The instant model gives the same action space.
    auto model = backends::make_backend("cost_model:a100");
    REQUIRE(model);
    CHECK(model->capabilities().parallel);
    CHECK(model->capabilities().threads == 6912);
  }

}  // TEST_SUITE
