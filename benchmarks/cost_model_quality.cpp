// How well the cost model ranks programs: random legal variants of matmul, softmax, conv2d and
// layernorm are measured on a real backend and estimated by the model, and the Spearman rank
// correlation between the two is printed per kernel, with the model's evaluation time per call.
//
//   cost_model_quality [--samples N] [--backend NAME] [--profile FILE] [--seed S]
//                      [--kernels a,b] [--csv OUT] [--replay CSV] [--budget SECONDS]
//                      [--calibrate-each yes] [--features OUT.csv]
//
// --calibrate-each runs `calibrate` before each kernel's measurements and estimates that
// kernel with the result (saved next to the CSV as OUT.KERNEL.profile, which --replay reads
// back): a shared machine's load drifts over the minutes a kernel takes, and OpenMP's fork cost
// with it, by orders of magnitude.
//
// Spearman is computed against the backend's median time ("spearman"), against the fastest
// timed run ("vs-min", which shared machines disturb less), and separately over the variants
// without and with a parallel scope ("serial", "parallel": OpenMP's costs on a shared machine
// drift the most).
//
// --features OUT.csv writes each sample's model features (cost_model_features.h) for study.
//
// --csv writes every sample (kernel, median, fastest, estimate, trace) so the model can be
// re-evaluated later with --replay, which re-applies the traces and re-estimates without
// measuring again: measuring is slow, iterating on the model should not be.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cost_model.h"
#include "backends/machine_profile.h"
#include "benchmarks/cost_model_features.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "transforms/registry.h"
#include "util/args.h"

using namespace perfdojo;

namespace {

struct KernelSpec {
  std::string name;  // what the report calls it
  std::string file;  // the suite file it is built from
  std::map<std::string, int> sizes;
};

// Moderate sizes: large enough that caches and vectors matter, small enough to measure 200
// variants of each in minutes.
const std::vector<KernelSpec>& specs() {
  static const std::vector<KernelSpec> kSpecs = {
      {"matmul", "matmul-256", {{"M", 256}, {"N", 256}, {"K", 256}}},
      {"softmax", "softmax", {{"B", 256}, {"N", 1024}}},
      {"conv2d",
       "conv2d-3x3",
       {{"C", 32}, {"K", 32}, {"H", 28}, {"W", 28}, {"HI", 30}, {"WI", 30}}},
      {"layernorm", "layernorm", {{"R", 256}, {"N", 1024}}},
  };
  return kSpecs;
}

// The suite file with its `NAME = VALUE` size lines replaced (as tests/support/scaled_kernels.h).
std::string kernel_text(const KernelSpec& k) {
  std::ifstream in(std::string(PERFDOJO_KERNEL_DIR) + "/" + k.file + ".pdj");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string out, line;
  std::istringstream lines(ss.str());
  while (std::getline(lines, line)) {
    auto eq = line.find(" = ");
    if (eq != std::string::npos && line.find('[') == std::string::npos && line[0] != '#' &&
        line.rfind("temp", 0) != 0 && line.rfind("output", 0) != 0) {
      auto s = k.sizes.find(line.substr(0, eq));
      if (s != k.sizes.end()) line = s->first + " = " + std::to_string(s->second);
    }
    out += line + "\n";
  }
  return out;
}

std::optional<transforms::Action> random_action(const ir::Program& p, const transforms::Target& t,
                                                std::mt19937_64& rng) {
  return transforms::sample_legal_action(p, t, rng);
}

// Statement copies the C printer emits (`:unroll` scopes up to 64 are written out), a proxy for
// compile time: nested unrolls can make GCC run for minutes and gigabytes.
double printed_size(const std::vector<ir::NodePtr>& body) {
  double n = 0;
  for (const auto& c : body) {
    if (!c->is_scope) {
      n += 1;
    } else {
      double inner = printed_size(c->body);
      n += c->annot == ir::Annot::kUnroll && c->extent <= 64
               ? static_cast<double>(c->extent) * inner
               : inner + 1;
    }
  }
  return n;
}

bool has_parallel(const std::vector<ir::NodePtr>& body) {
  for (const auto& c : body)
    if (c->is_scope && (c->annot == ir::Annot::kParallel || has_parallel(c->body))) return true;
  return false;
}

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k)
      r[idx[k]] = (static_cast<double>(i) + static_cast<double>(j)) / 2;
    i = j + 1;
  }
  return r;
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  if (x.size() < 2) return 0;
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mx += x[i] / n;
    my += y[i] / n;
  }
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  return pearson(ranks(x), ranks(y));
}

struct Sample {
  std::string kernel;
  std::vector<transforms::Action> trace;
  ir::Program program;
  double measured = 0;  // median of the timed runs (the backend's time)
  double fastest = 0;   // fastest timed run: less exposed to neighbours on a shared machine
  double estimate = 0;
};

std::string join_trace(const std::vector<transforms::Action>& t) {
  std::string s;
  for (const auto& a : t) s += (s.empty() ? "" : ";") + transforms::print_action(a);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "cost_model_quality [--samples N] [--backend NAME] [--profile FILE] [--seed S] "
      "[--kernels a,b] [--csv OUT] [--replay CSV] [--budget SECONDS] [--timeout SECONDS] "
      "[--max-size N] [--calibrate-each yes] [--features OUT.csv]";
  util::ArgSpec spec;
  spec.program = "cost_model_quality";
  spec.usage = usage;
  spec.value_options = {"samples", "backend", "profile", "seed",           "kernels",  "csv",
                        "replay",  "budget",  "timeout", "calibrate-each", "features", "max-size"};
  util::Args args;
  if (auto e = util::parse_args(spec, argc, argv, &args); !e.empty()) {
    std::cerr << "cost_model_quality: " << e << "\n";
    return 2;
  }
  if (args.help) {
    std::cout << "usage: " << usage << "\n";
    return 0;
  }
  int samples = 200;
  int64_t seed_arg = 1;
  double max_size = 1500, time_budget_s = 0.15, timeout_s = 3;
  for (const std::string& e : {args.get_int("samples", 1, 10000000, &samples),
                               args.get_int("seed", 0, INT64_MAX, &seed_arg),
                               args.get_double("max-size", 1, 1e15, &max_size),
                               args.get_double("budget", 0, 1e6, &time_budget_s),
                               args.get_double("timeout", 0, 1e6, &timeout_s)})
    if (!e.empty()) {
      std::cerr << "cost_model_quality: " << e << "\n";
      return 2;
    }
  const uint64_t seed = static_cast<uint64_t>(seed_arg);
  const std::string kernels_arg = args.get("kernels", "matmul,softmax,conv2d,layernorm");
  const std::string replay = args.get("replay", "");
  if (args.has("csv") && args.get("csv") == replay) {
    std::cerr << "--csv and --replay name the same file\n";
    return 2;
  }

  backends::MachineProfile profile = backends::default_profile();
  if (args.has("profile")) {
    std::string err;
    auto p = backends::load_profile(args.get("profile"), &err);
    if (!p) {
      std::cerr << err << "\n";
      return 1;
    }
    profile = *p;
  }
  std::unique_ptr<backends::Backend> backend;
  std::string backend_name = args.get("backend", "x86_avx512");
  if (replay.empty()) {
    backend = backends::make_backend(backend_name);
    if (!backend) {
      std::cerr << "unknown backend '" << backend_name << "'\n";
      return 2;
    }
    auto av = backend->available();
    if (!av.ok) {
      std::cerr << backend_name << " is not available here (" << av.why
                << "); measuring on x86_avx2 instead\n";
      backend_name = "x86_avx2";
      backend = backends::make_backend(backend_name);
      if (!backend || !backend->available().ok) {
        std::cerr << "x86_avx2 is not available either\n";
        return 1;
      }
    }
  }
  const transforms::Target target = *transforms::target_by_name("x86_avx512");
  backends::MeasureOptions mo;
  mo.verify = false;  // the transformations preserve semantics (the semantics guard checks that)
  mo.time_budget_s = time_budget_s;
  mo.min_reps = 7;  // a median of several: on a shared machine single runs are often disturbed
  mo.max_reps = 30;
  mo.timeout_s = timeout_s;

  std::set<std::string> wanted;
  {
    std::stringstream ss(kernels_arg);
    std::string k;
    while (std::getline(ss, k, ',')) wanted.insert(k);
  }
  // The profile each kernel is estimated with (--calibrate-each, or saved with a replayed CSV).
  std::map<std::string, backends::MachineProfile> kernel_profile;
  auto profile_of = [&](const std::string& k) -> const backends::MachineProfile& {
    auto it = kernel_profile.find(k);
    return it == kernel_profile.end() ? profile : it->second;
  };
  const bool calibrate_each = args.has("calibrate-each") && args.get("calibrate-each") != "no";
  std::map<std::string, ir::Program> originals;
  for (const auto& k : specs()) {
    if (!wanted.count(k.name)) continue;
    auto r = ir::load_program(kernel_text(k), k.file + ".pdj");
    if (!r.ok()) {
      std::cerr << k.name << ": " << r.error_text() << "\n";
      return 1;
    }
    originals.emplace(k.name, r.value());
  }

  std::vector<Sample> all;
  // Samples are written as they are measured, so an interrupted run still leaves its data.
  std::ofstream csv;
  if (args.has("csv")) {
    csv.open(args.get("csv"));
    csv << "kernel,measured_s,min_s,estimate_s,trace\n";
  }
  if (!replay.empty() && !args.has("profile")) {
    for (const auto& k : specs()) {
      std::string err;
      if (auto p = backends::load_profile(replay + "." + k.name + ".profile", &err))
        kernel_profile[k.name] = *p;
    }
  }
  if (!replay.empty()) {
    // kernel,measured_s,min_s,estimate_s,trace (min_s absent in older files)
    std::ifstream in(replay);
    if (!in) {
      std::cerr << replay << ": cannot read\n";
      return 1;
    }
    std::string line;
    std::getline(in, line);  // header
    const bool has_min = line.find("min_s") != std::string::npos;
    while (std::getline(in, line)) {
      std::stringstream ls(line);
      std::string kernel, meas, fastest, est, trace;
      std::getline(ls, kernel, ',');
      std::getline(ls, meas, ',');
      if (has_min) std::getline(ls, fastest, ',');
      std::getline(ls, est, ',');
      std::getline(ls, trace);
      if (!originals.count(kernel)) continue;
      std::string text;
      for (char c : trace) text += c == ';' ? '\n' : c;
      auto parsed = transforms::parse_trace(text);
      if (!parsed.ok()) continue;
      auto prog = transforms::replay(originals.at(kernel), parsed.value(), target);
      if (!prog.ok()) {
        std::cerr << "cannot replay a " << kernel << " trace: " << prog.error_text() << "\n";
        continue;
      }
      double m = std::atof(meas.c_str());
      all.push_back(
          {kernel, parsed.value(), prog.value(), m, has_min ? std::atof(fastest.c_str()) : m, 0});
    }
  } else {
    for (const auto& k : specs()) {
      if (!originals.count(k.name)) continue;
      const ir::Program& original = originals.at(k.name);
      if (calibrate_each) {
        backends::CalibrateOptions co;
        co.progress = [&](const std::string& line) {
          std::fprintf(stderr, "\r[%s] calibrate: %s\n", k.name.c_str(), line.c_str());
        };
        kernel_profile[k.name] = backends::calibrate(co);
        if (args.has("csv")) {
          std::string err;
          backends::save_profile(kernel_profile[k.name],
                                 args.get("csv") + "." + k.name + ".profile", &err);
        }
      }
      std::set<uint64_t> seen;
      std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + std::hash<std::string>{}(k.name));
      int made = 0, attempts = 0, timeouts = 0, too_large = 0;
      // The original itself is one sample.
      while (made < samples && attempts < samples * 20) {
        ++attempts;
        ir::Program cur = original;
        std::vector<transforms::Action> trace;
        int steps = made == 0 ? 0 : std::uniform_int_distribution<int>(1, 12)(rng);
        for (int s = 0; s < steps; ++s) {
          auto a = random_action(cur, target, rng);
          if (!a) break;
          auto next = transforms::apply(cur, *a, target);
          if (!next.ok()) break;
          cur = std::move(next).value();
          trace.push_back(*a);
        }
        if (!seen.insert(ir::structural_hash(cur)).second) continue;
        if (printed_size(cur.body) > max_size) {
          ++too_large;
          continue;
        }
        auto m = backend->measure(cur, mo);
        double t = m.median_s, fastest = m.min_s;
        if (!m.ok()) {
          // A variant slower than the timeout is still a sample: ranked at the timeout.
          if (m.error->find("timed out") == std::string::npos) {
            std::cerr << "\n"
                      << k.name << ": measurement failed (" << *m.error << ") for trace "
                      << join_trace(trace) << "\n";
            continue;
          }
          t = fastest = mo.timeout_s;
          ++timeouts;
        }
        ++made;
        all.push_back({k.name, trace, cur, t, fastest, 0});
        if (csv.is_open()) {
          csv << k.name << "," << t << "," << fastest << ","
              << backends::estimate_cost(cur, profile_of(k.name)).time_s << "," << join_trace(trace)
              << std::endl;
        }
        std::fprintf(stderr, "\r[%s] %d/%d measured on %s (%d over the timeout), last %.3g ms   ",
                     k.name.c_str(), made, samples, backend_name.c_str(), timeouts, t * 1e3);
        std::fflush(stderr);
      }
      std::fprintf(stderr, "\n[%s] %d variants skipped as too large to compile quickly\n",
                   k.name.c_str(), too_large);
    }
  }

  // Estimates, and the model's evaluation time per call: per program the best of five rounds of
  // three calls (a shared machine interrupts some of them), averaged over the programs.
  std::map<std::string, std::pair<double, int>> eval;  // kernel -> (sum of per-call times, count)
  double eval_max = 0;
  for (auto& s : all) {
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 3; ++i)
        s.estimate = backends::estimate_cost(s.program, profile_of(s.kernel)).time_s;
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 3);
    }
    eval[s.kernel].first += best;
    eval[s.kernel].second += 1;
    eval_max = std::max(eval_max, best);
  }
  double eval_sum = 0;
  for (const auto& [k, v] : eval) eval_sum += v.first;

  if (args.has("features")) {  // every sample's correction features, for offline study
    std::ofstream fo(args.get("features"));
    fo << "kernel,measured_s,estimate_s";
    for (int i = 0; i < backends::kModelFeatures; ++i) fo << ",f" << i;
    fo << "\n";
    for (const auto& s : all) {
      const auto& prof = profile_of(s.kernel);
      auto f = backends::model_features(s.program, backends::estimate_cost(s.program, prof), prof);
      fo << s.kernel << "," << s.measured << "," << s.estimate;
      for (double v : f) fo << "," << v;
      fo << "\n";
    }
  }

  if (csv.is_open() && !replay.empty()) {
    for (const auto& s : all)
      csv << s.kernel << "," << s.measured << "," << s.fastest << "," << s.estimate << ","
          << join_trace(s.trace) << "\n";
  }

  std::printf("cost model quality (%s, %s measurements)\n",
              kernel_profile.empty() ? (profile.name + " profile").c_str()
                                     : "a profile calibrated per kernel",
              replay.empty() ? backend_name.c_str() : replay.c_str());
  std::printf("%-10s %8s %9s %9s %9s %9s %9s %12s %9s %12s\n", "kernel", "samples", "spearman",
              "vs-min", "serial", "parallel", "log-corr", "median-ratio", "top-pick",
              "us/estimate");
  bool all_good = true;
  for (const auto& k : specs()) {
    std::vector<double> meas, fastest, est, lm, le, ratio, sm, se, pm, pe;
    double eval_s = 0;
    for (const auto& s : all) {
      if (s.kernel != k.name) continue;
      meas.push_back(s.measured);
      (has_parallel(s.program.body) ? pm : sm).push_back(s.measured);
      (has_parallel(s.program.body) ? pe : se).push_back(s.estimate);
      fastest.push_back(s.fastest);
      est.push_back(s.estimate);
      lm.push_back(std::log(std::max(s.measured, 1e-12)));
      le.push_back(std::log(std::max(s.estimate, 1e-12)));
      ratio.push_back(s.estimate / std::max(s.measured, 1e-12));
    }
    if (meas.empty()) continue;
    eval_s = eval[k.name].first / std::max(1, eval[k.name].second);
    std::sort(ratio.begin(), ratio.end());
    double rho = spearman(meas, est);
    // The model's favourite, as measured, over the fastest variant measured: what a search that
    // trusted the model's first choice would lose.
    const size_t pick = static_cast<size_t>(std::min_element(est.begin(), est.end()) - est.begin());
    const double top_pick = meas[pick] / *std::min_element(meas.begin(), meas.end());
    all_good = all_good && rho >= 0.9 && top_pick <= 1.2;
    std::printf("%-10s %8zu %9.3f %9.3f %9.3f %9.3f %9.3f %12.3g %9.2f %12.2f\n", k.name.c_str(),
                meas.size(), rho, spearman(fastest, est), spearman(sm, se), spearman(pm, pe),
                pearson(lm, le), ratio[ratio.size() / 2], top_pick, eval_s * 1e6);
  }
  csv.close();
  std::printf("model evaluation: %.2f us per call on average, %.2f us at most (%zu programs)\n",
              all.empty() ? 0.0 : eval_sum / static_cast<double>(all.size()) * 1e6, eval_max * 1e6,
              all.size());
  std::printf(
      "%s\n",
      all_good ? "target met: Spearman >= 0.9 and top pick within 1.2x of the best on every kernel"
               : "target missed: Spearman < 0.9 or top pick beyond 1.2x on some kernel");
  return 0;
}
