#include "backends/interpreter_backend.h"

#include <chrono>

#include "ir/interp.h"

namespace perfdojo::backends {
namespace {

class InterpreterBackend final : public Backend {
 public:
  explicit InterpreterBackend(BackendConfig c) : config_(std::move(c)) {}
  std::string name() const override { return "interpreter"; }
  Availability available() const override { return {}; }
  Capabilities capabilities() const override { return {{16, 8}, true, 1}; }
  bool deterministic() const override { return false; }
  Measurement measure(const ir::Program& p, const MeasureOptions& o) override {
    Measurement m;
    auto inputs = ir::make_inputs(p, o.seed);
    auto t0 = std::chrono::steady_clock::now();
    auto r = ir::interpret(p, inputs);
    auto t1 = std::chrono::steady_clock::now();
    if (!r.ok()) {
      m.error = r.error_text();
      return m;
    }
    m.median_s = m.min_s = std::chrono::duration<double>(t1 - t0).count();
    m.reps = 1;
    m.verified = true;
    m.flags = "reference interpreter";
    return m;
  }
  std::unique_ptr<Backend> clone() const override {
    return std::make_unique<InterpreterBackend>(config_);
  }

 private:
  BackendConfig config_;
};

}  // namespace

std::unique_ptr<Backend> make_interpreter_backend(const BackendConfig& config) {
  return std::make_unique<InterpreterBackend>(config);
}

namespace {
[[maybe_unused]] const bool kInterpreterBackendRegistered = register_backend(
    "interpreter", 31, [](const BackendConfig& c) { return make_interpreter_backend(c); });
}  // namespace

}  // namespace perfdojo::backends
