// perfdojo._native: the C++ libraries bound into Python (pybind11), in-process. The Python
// package `perfdojo` (python/perfdojo/) wraps these thin bindings into the user-facing API; the
// bindings stay close to the C++ types and never hold the GIL while C++ works.
//
// Failures the caller can fix come back as data (diagnostics as dicts, legality verdicts), and
// the Python layer turns them into exceptions, so the messages are the C++ ones verbatim.
//
// Arrays cross as bytes (little-endian, C order) that the Python layer views with
// numpy.frombuffer: no numpy C API here, so the module works with whatever numpy is installed
// (Debian's pybind11 2.10 predates NumPy 2's ABI, and its numpy arrays come out wrong there).
#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/x86_backend.h"
#include "bridge/reply.h"
#include "bridge/request.h"
#include "gym/dataset.h"
#include "gym/env.h"
#include "gym/vector_env.h"
#include "ir/check.h"
#include "ir/interp.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "optimizer/optimizer.h"
#include "transforms/action.h"
#include "transforms/registry.h"
#include "util/json.h"

namespace py = pybind11;
using namespace perfdojo;

namespace {

// ---------------------------------------------------------------- diagnostics

py::list diagnostics(const std::vector<ir::Diagnostic>& ds) {
  py::list out;
  for (const auto& d : ds) {
    py::dict x;
    x["file"] = d.loc.file.str();
    x["line"] = d.loc.line;
    x["col"] = d.loc.col;
    x["message"] = d.message;
    x["text"] = d.str();
    out.append(x);
  }
  return out;
}

// ---------------------------------------------------------------- programs

const char* py_dtype_name(ir::DType t) {
  switch (t) {
    case ir::DType::kF32:
      return "float32";
    case ir::DType::kF64:
      return "float64";
    case ir::DType::kI32:
      return "int32";
    case ir::DType::kBF16:  // NumPy has no bf16: the float32 values it widens to, exactly
      return "float32";
    case ir::DType::kF16:
      return "float16";
    case ir::DType::kI8:
      return "int8";
    case ir::DType::kU8:
      return "uint8";
  }
  return "float32";
}

const char* py_role_name(ir::Role r) {
  switch (r) {
    case ir::Role::kInput:
      return "input";
    case ir::Role::kOutput:
      return "output";
    case ir::Role::kTemp:
      return "temp";
  }
  return "temp";
}

template <class T>
py::bytes bytes_of(const T* data, size_t n) {
  return py::bytes(reinterpret_cast<const char*>(data), n * sizeof(T));
}
template <class T>
py::bytes bytes_of(const std::vector<T>& v) {
  return bytes_of(v.data(), v.size());
}

// (dtype name, shape, bytes) of a tensor in its declared element type.
py::tuple tensor_bytes(const ir::Tensor& t) {
  auto as = [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> v(t.data.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(t.data[i]);
    return bytes_of(v);
  };
  auto bits16 = [&] {  // f16: its encoding, which NumPy's float16 reads
    std::vector<uint16_t> v(t.data.size());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<uint16_t>(ir::narrow_bits(t.dtype, t.data[i]));
    return bytes_of(v);
  };
  py::bytes b = t.dtype == ir::DType::kF64   ? as(double{})
                : t.dtype == ir::DType::kI32 ? as(int32_t{})
                : t.dtype == ir::DType::kI8  ? as(int8_t{})
                : t.dtype == ir::DType::kU8  ? as(uint8_t{})
                : t.dtype == ir::DType::kF16 ? bits16()
                                             : as(float{});
  return py::make_tuple(py_dtype_name(t.dtype), py::tuple(py::cast(t.shape)), b);
}

// The tensor for `decl` from float64 values in C order (the Python layer converts).
std::optional<std::string> to_tensor(const ir::BufferDecl& decl, const std::vector<int64_t>& shape,
                                     const std::string& f64, ir::Tensor* out) {
  if (shape.size() != decl.shape.size())
    return "input '" + decl.name + "' has " + std::to_string(shape.size()) +
           " dimensions, the program declares " + std::to_string(decl.shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != decl.shape[d])
      return "input '" + decl.name + "' dimension " + std::to_string(d) + " is " +
             std::to_string(shape[d]) + ", the program declares " + std::to_string(decl.shape[d]);
  const size_t n = static_cast<size_t>(decl.elements());
  if (f64.size() != n * sizeof(double)) return "input '" + decl.name + "': wrong number of bytes";
  out->dtype = decl.dtype;
  out->shape = decl.shape;
  out->data.resize(n);
  std::memcpy(out->data.data(), f64.data(), f64.size());
  return std::nullopt;
}

struct PyProgram {
  ir::Program program;
};

py::tuple parse(const std::string& text, const std::string& file) {
  auto r = ir::load_program(text, file);  // parse and check
  if (!r.ok()) return py::make_tuple(py::none(), diagnostics(r.errors()));
  return py::make_tuple(PyProgram{std::move(r).value()}, py::list());
}

py::list buffers(const PyProgram& p) {
  py::list out;
  for (const auto& b : p.program.buffers) {
    py::dict x;
    x["name"] = b.name;
    x["role"] = py_role_name(b.role);
    x["dtype"] = py_dtype_name(b.dtype);
    x["shape"] = py::tuple(py::cast(b.shape));
    out.append(x);
  }
  return out;
}

// (outputs or every buffer, error text or "")
py::tuple interpret(const PyProgram& p, const py::object& inputs, uint64_t seed, bool all_buffers,
                    bool strict) {
  ir::TensorMap in = ir::make_inputs(p.program, seed);
  if (!inputs.is_none()) {
    // {name: (shape, float64 bytes)}
    py::dict given = inputs.cast<py::dict>();
    for (auto item : given) {
      const std::string name = py::str(item.first);
      const ir::BufferDecl* decl = p.program.find_buffer(name);
      if (!decl || decl->role != ir::Role::kInput)
        return py::make_tuple(py::none(), "'" + name + "' is not an input of this program");
      py::tuple v = item.second.cast<py::tuple>();
      ir::Tensor t;
      if (auto err =
              to_tensor(*decl, v[0].cast<std::vector<int64_t>>(), v[1].cast<std::string>(), &t))
        return py::make_tuple(py::none(), *err);
      in[name] = std::move(t);
    }
  }
  ir::Result<ir::TensorMap> r = [&] {
    py::gil_scoped_release release;
    return ir::interpret(p.program, in, {.forbid_uninitialised_reads = strict});
  }();
  if (!r.ok()) return py::make_tuple(py::none(), r.error_text());
  py::dict out;
  for (const auto& [name, t] : r.value()) {
    const ir::BufferDecl* decl = p.program.find_buffer(name);
    if (all_buffers || (decl && decl->role == ir::Role::kOutput))
      out[py::str(name)] = tensor_bytes(t);
  }
  return py::make_tuple(out, "");
}

// (program or None, legality name, message)
py::tuple apply_action(const PyProgram& p, const std::string& text,
                       const std::string& target_name) {
  auto target = transforms::target_by_name(target_name);
  if (!target)
    return py::make_tuple(py::none(), "bad_target", "unknown target '" + target_name + "'");
  auto a = transforms::parse_action(text, "<action>");
  if (!a.ok()) return py::make_tuple(py::none(), "parse_error", a.error_text());
  transforms::Legality l = transforms::check(p.program, a.value(), *target);
  if (!l.ok())
    return py::make_tuple(py::none(), transforms::reason_name(l.reason),
                          transforms::explain(a.value(), l));
  auto next = transforms::apply(p.program, a.value(), *target);
  if (!next.ok()) return py::make_tuple(py::none(), "error", next.error_text());
  return py::make_tuple(PyProgram{std::move(next).value()}, "ok", "");
}

std::vector<std::string> legal_actions(const PyProgram& p, const std::string& target_name) {
  auto target = transforms::target_by_name(target_name);
  if (!target)
    throw py::value_error("unknown target '" + target_name + "' (x86_avx512, x86_avx2, x86_64)");
  std::vector<std::string> out;
  for (const auto& a : transforms::legal_actions(p.program, *target))
    out.push_back(transforms::print_action(a));
  return out;
}

// ---------------------------------------------------------------- env observations and info

py::dict observation(const env::Observation& o, const std::vector<std::string>& spaces) {
  py::dict out;
  for (const auto& s : spaces) {
    if (s == "features") {
      out["features"] = bytes_of(o.features);
    } else if (s == "tokens") {
      out["tokens"] = bytes_of(o.tokens);
    } else if (s == "ir_text") {
      out["ir_text"] = o.ir_text;
    } else if (s == "graph") {
      py::dict g;
      g["num_nodes"] = o.graph.num_nodes;
      g["node_features"] = bytes_of(o.graph.node_features);
      g["edge_src"] = bytes_of(o.graph.edge_src);
      g["edge_dst"] = bytes_of(o.graph.edge_dst);
      g["edge_type"] = bytes_of(o.graph.edge_type);
      out["graph"] = g;
    }
  }
  return out;
}

// The best trace's action texts, remembered while the best trace stays the same (most steps):
// printing every action of it again on every step cost more than the rest of the info.
struct TraceCache {
  std::vector<transforms::Action> actions;
  py::list texts;
  bool valid = false;
};

py::dict info(const env::Info& i, TraceCache* cache = nullptr) {
  py::dict d;
  d["benchmark"] = i.benchmark;
  d["step"] = i.step;
  d["action"] = i.action;
  d["illegal_action"] = i.illegal_action;
  d["legality"] = i.legality;
  d["legality_message"] = i.legality_message;
  d["action_had_no_effect"] = i.action_had_no_effect;
  d["time_s"] = i.time_s;
  d["initial_time_s"] = i.initial_time_s;
  d["best_time_s"] = i.best_time_s;
  if (cache && cache->valid && cache->actions == i.best_trace) {
    d["best_trace"] = py::reinterpret_steal<py::list>(PySequence_List(cache->texts.ptr()));
  } else {
    py::list trace;
    for (const auto& a : i.best_trace) trace.append(transforms::print_action(a));
    if (cache) {
      cache->actions = i.best_trace;
      cache->texts = py::reinterpret_steal<py::list>(PySequence_List(trace.ptr()));
      cache->valid = true;
    }
    d["best_trace"] = trace;
  }
  d["action_mask"] = bytes_of(i.action_mask);  // 0/1 bytes
  d["error"] = i.error ? py::object(py::str(*i.error)) : py::object(py::none());
  d["cursor"] = i.cursor;
  return d;
}

// The env config from its JSON (the bridge's reader: the same fields, checks and messages).
env::EnvConfig config_of(const std::string& json_text, bool allow_files,
                         const std::string& profile_dir) {
  util::json::Document doc;
  if (auto err = util::parse_json(json_text, &doc))
    throw py::value_error("config: " + err->message());
  bridge::ConfigPolicy policy;
  policy.allow_files = allow_files;
  if (!profile_dir.empty()) {
    policy.backend_config.profile_dir = profile_dir;
    policy.backend_config.cache_dir = profile_dir;
  }
  try {
    return bridge::config_from_json(doc, policy);
  } catch (const bridge::RequestError& e) {
    throw py::value_error(std::string(bridge::error_type_name(e.error.type)) + ": " +
                          e.error.message);
  }
}

std::string spaces_json(const env::Env& e) {
  util::JsonWriter w;
  bridge::write_spaces(w, e);
  return w.take();
}

struct PyEnv {
  std::unique_ptr<env::Env> env;
  std::shared_ptr<TraceCache> traces = std::make_shared<TraceCache>();

  static PyEnv make(const std::string& config_json, bool allow_files,
                    const std::string& profile_dir) {
    env::EnvConfig c = config_of(config_json, allow_files, profile_dir);
    auto made = env::Env::make(c);
    if (!made.ok()) throw py::value_error("config_error: " + made.error_text());
    PyEnv out;
    out.env = std::move(made).value();
    return out;
  }

  py::tuple reset(std::optional<uint64_t> seed, std::optional<std::string> benchmark) {
    env::ResetOptions o;
    o.benchmark = std::move(benchmark);
    std::pair<env::Observation, env::Info> r;
    {
      py::gil_scoped_release release;
      r = env->reset(seed, o);
    }
    return py::make_tuple(observation(r.first, env->config().observation_spaces),
                          info(r.second, traces.get()));
  }

  py::tuple result(const env::StepResult& r) {
    return py::make_tuple(observation(r.observation, env->config().observation_spaces), r.reward,
                          r.terminated, r.truncated, info(r.info, traces.get()));
  }

  py::tuple step(int action) {
    const int n = env->action_spec().n;
    if (action < 0 || action >= n)
      throw py::value_error("invalid_action: action " + std::to_string(action) +
                            " is out of range [0, " + std::to_string(n) +
                            "); the episode is unchanged");
    env::StepResult r;
    {
      py::gil_scoped_release release;
      r = env->step(action);
    }
    return result(r);
  }

  py::tuple step_text(const std::string& text) {
    auto a = transforms::parse_action(text, "<action>");
    if (!a.ok()) throw py::value_error("invalid_action: " + a.error_text());
    env::StepResult r;
    {
      py::gil_scoped_release release;
      r = env->step_action(a.value());
    }
    return result(r);
  }

  py::bytes action_mask() {
    std::vector<uint8_t> m;
    {
      py::gil_scoped_release release;
      m = env->action_mask();
    }
    return bytes_of(m);
  }

  std::string program_text() const { return ir::print_program(env->program()); }
  std::string state_json() const {
    util::JsonWriter w;
    bridge::write_state(w, env->state());
    return w.take();
  }
  PyEnv fork() const {
    PyEnv out;
    out.env = env->fork();
    return out;
  }
};

struct PyVectorEnv {
  std::unique_ptr<env::VectorEnv> venv;
  std::vector<std::string> spaces;
  int n_actions = 0;

  static PyVectorEnv make(const std::string& config_json, int n, bool same_step, bool allow_files,
                          const std::string& profile_dir) {
    env::EnvConfig c = config_of(config_json, allow_files, profile_dir);
    for (const auto& s : c.observation_spaces)
      if (s != "features" && s != "tokens")
        throw py::value_error(
            "the in-process vector env stacks numeric observations only (features, tokens); '" + s +
            "' needs single envs");
    if (n < 1) throw py::value_error("num_envs must be at least 1");
    auto made = env::VectorEnv::make(
        c, n, same_step ? env::AutoReset::kSameStep : env::AutoReset::kNextStep);
    if (!made.ok()) throw py::value_error("config_error: " + made.error_text());
    PyVectorEnv v;
    v.venv = std::move(made).value();
    v.spaces = c.observation_spaces;
    v.n_actions = v.venv->at(0).action_spec().n;
    return v;
  }

  std::string spaces_json() const { return ::spaces_json(venv->at(0)); }

  // (observations {space: bytes of count rows}, info {name: bytes of count values}) in the
  // sub-envs' order; the Python layer views them as arrays.
  template <class GetObs, class GetInfo>
  py::tuple stack(int count, GetObs get_obs, GetInfo get_info) {
    py::dict obs;
    for (const auto& s : spaces) {
      if (s == "features") {
        std::vector<float> all;
        for (int i = 0; i < count; ++i)
          all.insert(all.end(), get_obs(i).features.begin(), get_obs(i).features.end());
        obs["features"] = bytes_of(all);
      } else {
        std::vector<int32_t> all;
        for (int i = 0; i < count; ++i)
          all.insert(all.end(), get_obs(i).tokens.begin(), get_obs(i).tokens.end());
        obs["tokens"] = bytes_of(all);
      }
    }
    std::vector<uint8_t> mask;
    mask.reserve(static_cast<size_t>(count) * n_actions);
    std::vector<double> t(count), t0(count), best(count);
    std::vector<int32_t> step(count);
    std::vector<uint8_t> illegal(count), no_effect(count);
    py::list message;
    for (int i = 0; i < count; ++i) {
      const env::Info& in = get_info(i);
      mask.insert(mask.end(), in.action_mask.begin(), in.action_mask.end());
      t[i] = in.time_s;
      t0[i] = in.initial_time_s;
      best[i] = in.best_time_s;
      step[i] = in.step;
      illegal[i] = in.illegal_action;
      no_effect[i] = in.action_had_no_effect;
      message.append(in.error            ? *in.error
                     : in.illegal_action ? in.legality_message
                                         : std::string());
    }
    py::dict info;
    info["action_mask"] = bytes_of(mask);
    info["time_s"] = bytes_of(t);
    info["initial_time_s"] = bytes_of(t0);
    info["best_time_s"] = bytes_of(best);
    info["step"] = bytes_of(step);
    info["illegal_action"] = bytes_of(illegal);
    info["action_had_no_effect"] = bytes_of(no_effect);
    info["message"] = message;
    return py::make_tuple(obs, info);
  }

  py::tuple reset(std::optional<uint64_t> seed) {
    std::vector<std::pair<env::Observation, env::Info>> r;
    {
      py::gil_scoped_release release;
      r = venv->reset(seed);
    }
    const int n = static_cast<int>(r.size());
    return stack(
        n, [&](int i) -> const env::Observation& { return r[i].first; },
        [&](int i) -> const env::Info& { return r[i].second; });
  }

  // `actions`: one int64 per env, as bytes.
  py::tuple step(const std::string& actions) {
    const int n = venv->size();
    if (actions.size() != static_cast<size_t>(n) * sizeof(int64_t))
      throw py::value_error(std::to_string(actions.size() / sizeof(int64_t)) + " actions for " +
                            std::to_string(n) + " envs");
    std::vector<int> a(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      int64_t x;
      std::memcpy(&x, actions.data() + i * sizeof(int64_t), sizeof x);
      if (x < 0 || x >= n_actions)
        throw py::value_error("invalid_action: action " + std::to_string(x) + " of env " +
                              std::to_string(i) + " is out of range [0, " +
                              std::to_string(n_actions) + "); no env was stepped");
      a[static_cast<size_t>(i)] = static_cast<int>(x);
    }
    std::vector<env::VectorStep> r;
    {
      py::gil_scoped_release release;
      r = venv->step(a);
    }
    py::tuple oi = stack(
        n, [&](int i) -> const env::Observation& { return r[i].result.observation; },
        [&](int i) -> const env::Info& { return r[i].result.info; });
    std::vector<double> reward(n);
    std::vector<uint8_t> term(n), trunc(n), ignored(n), has_final(n);
    for (int i = 0; i < n; ++i) {
      reward[i] = r[i].result.reward;
      term[i] = r[i].result.terminated;
      trunc[i] = r[i].result.truncated;
      ignored[i] = r[i].autoreset_ignored_action;
      has_final[i] = r[i].final_observation.has_value();
    }
    py::dict info = oi[1].cast<py::dict>();
    info["autoreset_ignored_action"] = bytes_of(ignored);
    py::list final_obs, final_info;
    if (std::any_of(has_final.begin(), has_final.end(), [](uint8_t f) { return f != 0; })) {
      // Same-step autoreset: the finished episodes' last observations and infos.
      for (int i = 0; i < n; ++i) {
        final_obs.append(r[i].final_observation
                             ? py::object(observation(*r[i].final_observation, spaces))
                             : py::none());
        final_info.append(r[i].final_info ? py::object(::info(*r[i].final_info)) : py::none());
      }
    }
    return py::make_tuple(oi[0], bytes_of(reward), bytes_of(term), bytes_of(trunc), info, final_obs,
                          final_info);
  }
};

// ---------------------------------------------------------------- the optimiser

py::dict report_dict(const optimizer::Report& r) {
  py::dict d;
  d["arch"] = r.arch;
  d["mode"] = r.mode;
  d["baseline_s"] = r.baseline_s;
  d["final_s"] = r.final_s;
  d["baseline_min_s"] = r.baseline_min_s;
  d["final_min_s"] = r.final_min_s;
  d["baseline_spread"] = r.baseline_spread;
  d["final_spread"] = r.final_spread;
  d["final_reps"] = r.final_reps;
  d["timing"] = r.modelled ? "modelled" : r.interleaved ? "interleaved" : "separate";
  d["noisy"] = r.noisy;
  d["cache_flushed"] = r.cache_flushed;
  d["first_measured_s"] = r.first_measured_s;
  d["seed"] = r.seed;
  d["budget_s"] = r.budget_s;
  d["speedup"] = r.speedup;
  d["flops"] = r.flops;
  d["original_flops"] = r.original_flops;
  d["gflops"] = r.gflops;
  d["peak_fraction"] = r.peak_fraction;
  d["peak_gflops_per_core"] = r.peak_gflops;
  d["evaluations"] = r.evaluations;
  d["measurements"] = r.measurements;
  d["outcome"] = r.outcome;
  d["outcome_why"] = r.outcome_why;
  d["verified"] = r.verified;
  d["device_unrun"] = r.device_unrun;
  d["verified_on"] = r.verified_on;
  d["interrupted"] = r.interrupted;
  d["flags"] = r.flags;
  d["threads"] = r.threads;
  d["profile"] = r.profile;
  d["proposals_used"] = r.proposals_used;
  d["sketches_used"] = r.sketches_used;
  d["actions_dropped"] = r.actions_dropped;
  d["note"] = r.note;
  py::list curve;
  for (const auto& p : r.curve) {
    py::dict c;
    c["elapsed_s"] = p.elapsed_s;
    c["evaluations"] = p.evaluations;
    c["best_estimate_s"] = p.best_estimate_s;
    c["best_measured_s"] = p.best_measured_s;
    curve.append(c);
  }
  d["curve"] = curve;
  return d;
}

struct PyOptimizer {
  std::unique_ptr<optimizer::Optimizer> opt;

  static PyOptimizer make(const std::string& arch, const std::string& mode,
                          const std::string& profile_dir, int threads,
                          const std::string& cache_flush) {
    auto m = optimizer::mode_by_name(mode);
    if (!m)
      throw py::value_error("unknown mode '" + mode + "' (conservative, balanced, aggressive)");
    backends::BackendConfig config;
    if (!profile_dir.empty()) {
      config.profile_dir = profile_dir;
      config.cache_dir = profile_dir;
    }
    if (threads > 0) config.threads = threads;
    auto flush = backends::parse_cache_flush(cache_flush);
    if (!flush)
      throw py::value_error("cache_flush must be auto, on or off, not '" + cache_flush + "'");
    config.cache_flush = *flush;
    ir::Result<std::unique_ptr<optimizer::Optimizer>> made = [&] {
      py::gil_scoped_release release;  // may calibrate the machine (seconds)
      return optimizer::Optimizer::make(arch, *m, config);
    }();
    if (!made.ok()) throw py::value_error(made.error_text());
    return PyOptimizer{std::move(made).value()};
  }

  // (program, trace texts, C source, C header, report, interrupted by KeyboardInterrupt)
  py::tuple transform(const PyProgram& p, double timeout_s, const py::object& progress) {
    std::atomic<bool> cancel{false};
    bool keyboard = false;
    optimizer::Result r;
    {
      py::gil_scoped_release release;
      r = opt->transform(
          p.program, timeout_s,
          [&](double fraction, int evaluations, double speedup) {
            // Ctrl-C reaches Python's handler only while Python runs: look at it here, and
            // stop the search (the best verified program so far comes back).
            py::gil_scoped_acquire hold;
            if (PyErr_CheckSignals() != 0) {
              if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) keyboard = true;
              PyErr_Clear();
              cancel = true;
            }
            if (!progress.is_none()) {
              try {
                progress(fraction, evaluations, speedup);
              } catch (py::error_already_set& e) {
                if (e.matches(PyExc_KeyboardInterrupt)) keyboard = true;
                cancel = true;
              }
            }
          },
          &cancel);
    }
    py::list trace;
    for (const auto& a : r.trace) trace.append(transforms::print_action(a));
    return py::make_tuple(PyProgram{std::move(r.program)}, trace, r.c_source, r.c_header,
                          report_dict(r.report), keyboard);
  }
};

std::string this_isa() {
  for (const char* candidate : {"x86_avx512", "x86_avx2", "x86_64"}) {
    auto b = backends::make_backend(candidate);
    if (b && b->available().ok) return candidate;
  }
  return "";
}

// The x86 backend's compiler flags and link libraries for `arch`, so that a library built
// outside the backend (perfdojo.torch_import) compiles its kernels as they were measured.
py::tuple build_flags(const std::string& arch) {
  auto isa = backends::x86_isa_by_name(arch);
  if (!isa)
    throw py::value_error("build_flags: '" + arch +
                          "' is not an x86 ISA (x86_avx512, x86_avx2, x86_64)");
  return py::make_tuple(backends::x86_compile_flags(*isa), backends::x86_link_libraries());
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "PerfDojo's C++ libraries, in-process (the perfdojo package wraps them)";

  py::class_<PyProgram>(m, "Program")
      .def("text", [](const PyProgram& p) { return ir::print_program(p.program); })
      .def("check", [](const PyProgram& p) { return diagnostics(ir::check_program(p.program)); })
      .def("buffers", &buffers)
      .def("interpret", &interpret, py::arg("inputs"), py::arg("seed"), py::arg("all_buffers"),
           py::arg("strict"))
      .def("apply", &apply_action, py::arg("action"), py::arg("target"))
      .def("legal_actions", &legal_actions, py::arg("target"))
      .def("equals",
           [](const PyProgram& a, const PyProgram& b) {
             return ir::structurally_equal(a.program, b.program);
           })
      .def("hash", [](const PyProgram& p) { return ir::structural_hash(p.program); });

  m.def("parse", &parse, py::arg("text"), py::arg("file") = "<string>",
        "(Program, []) or (None, diagnostics): parses and checks IR text");
  m.def("load_benchmark", [](const std::string& uri) {
    auto r = env::load_benchmark(uri);
    if (!r.ok()) return py::make_tuple(py::none(), diagnostics(r.errors()));
    return py::make_tuple(PyProgram{std::move(r).value()}, py::list());
  });
  m.def("build_flags", &build_flags, py::arg("arch"),
        "(compile flags, link libraries) the x86 backend builds a kernel with");
  m.def("this_isa", &this_isa, "the widest x86 ISA this CPU runs: x86_avx512, x86_avx2 or x86_64");

  py::class_<PyEnv>(m, "Env")
      .def_static("make", &PyEnv::make, py::arg("config_json"), py::arg("allow_files"),
                  py::arg("profile_dir"))
      .def("reset", &PyEnv::reset, py::arg("seed"), py::arg("benchmark"))
      .def("step", &PyEnv::step)
      .def("step_text", &PyEnv::step_text)
      .def("action_mask", &PyEnv::action_mask)
      .def("spaces_json", [](const PyEnv& e) { return spaces_json(*e.env); })
      .def("program_text", &PyEnv::program_text)
      .def("state_json", &PyEnv::state_json)
      .def("fork", &PyEnv::fork);

  py::class_<PyVectorEnv>(m, "VectorEnv")
      .def_static("make", &PyVectorEnv::make, py::arg("config_json"), py::arg("num_envs"),
                  py::arg("same_step"), py::arg("allow_files"), py::arg("profile_dir"))
      .def("reset", &PyVectorEnv::reset, py::arg("seed"))
      .def("step", &PyVectorEnv::step)
      .def("spaces_json", &PyVectorEnv::spaces_json)
      .def_readonly("n_actions", &PyVectorEnv::n_actions);

  py::class_<PyOptimizer>(m, "Optimizer")
      .def_static("make", &PyOptimizer::make, py::arg("arch"), py::arg("mode"),
                  py::arg("profile_dir"), py::arg("threads"), py::arg("cache_flush") = "auto")
      .def("transform", &PyOptimizer::transform, py::arg("program"), py::arg("timeout_s"),
           py::arg("progress"));
}
