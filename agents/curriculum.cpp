#include "agents/curriculum.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "gym/dataset.h"
#include "gym/observation.h"

namespace perfdojo::agents {

ir::Result<std::vector<std::string>> resolve_kernels(const std::string& spec) {
  if (spec == "train") return env::train_split();
  if (spec == "test") return env::test_split();
  if (spec == "all") return env::suite_uris();
  // "family:attention,norm" (those families) and "except:attention" (every other kernel): hold
  // whole families out of training and evaluate on them. "except:" also takes suite kernel
  // names, held out one by one ("except:conv,norm,matmul-1024").
  for (const char* prefix : {"family:", "except:"}) {
    if (spec.rfind(prefix, 0) != 0) continue;
    const bool inside = std::string(prefix) == "family:";
    std::vector<std::string> families;
    std::set<std::string> held_out;  // kernel URIs
    std::stringstream fs(spec.substr(std::string(prefix).size()));
    std::string f;
    std::set<std::string> known;
    for (const auto& [name, family] : env::kernel_families()) known.insert(family);
    while (std::getline(fs, f, ',')) {
      if (f.empty()) continue;
      if (!inside && !known.count(f) && env::kernel_families().count(f)) {
        held_out.insert("perfdojo://suite/" + f);
        continue;
      }
      if (!known.count(f)) {
        std::string all;
        for (const auto& k : known) all += (all.empty() ? "" : ", ") + k;
        return std::vector<ir::Diagnostic>{
            {{"kernels", 0, 0}, "unknown kernel family '" + f + "'; expected one of " + all}};
      }
      families.push_back(f);
    }
    auto out = env::family_kernels(families, inside);
    std::erase_if(out, [&](const std::string& u) { return held_out.count(u) > 0; });
    if (out.empty())
      return std::vector<ir::Diagnostic>{{{"kernels", 0, 0}, "no kernels in '" + spec + "'"}};
    return out;
  }
  std::vector<std::string> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    // Bare suite names are accepted for convenience: "softmax" means perfdojo://suite/softmax.
    if (item.find("://") == std::string::npos && item.find(".pdj") == std::string::npos)
      item = "perfdojo://suite/" + item;
    out.push_back(item);
  }
  if (out.empty())
    return std::vector<ir::Diagnostic>{
        {{"kernels", 0, 0},
         "no kernels in '" + spec +
             "' (train, test, all, family:F,.., except:F,.. or a comma list)"}};
  return out;
}

ir::Result<std::vector<RankedKernel>> rank_kernels(const std::vector<std::string>& uris) {
  std::vector<RankedKernel> out;
  for (const auto& u : uris) {
    auto p = env::load_benchmark(u);
    if (!p.ok()) return p.errors();
    std::vector<float> f = env::features(p.value(), -1);
    out.push_back({u, f[0] + 2.0 * f[3] + f[4]});
  }
  std::stable_sort(out.begin(), out.end(), [](const RankedKernel& a, const RankedKernel& b) {
    return a.complexity != b.complexity ? a.complexity < b.complexity : a.uri < b.uri;
  });
  return out;
}

Curriculum::Curriculum(std::vector<RankedKernel> kernels, const AgentConfig& c)
    : kernels_(std::move(kernels)),
      enabled_(c.curriculum),
      start_(c.curriculum_start),
      step_(c.curriculum_step),
      promote_(c.promote_speedup),
      fraction_(c.curriculum_fraction) {
  int n = static_cast<int>(kernels_.size());
  if (enabled_ && n > start_ && fraction_ > 0) {
    // Staged part: start_, start_ + step_, ... kernels while fewer than all; then fine-tuning.
    stages_ = 1 + (n - start_ + step_ - 1) / step_;
  } else {
    stages_ = 1;
  }
  active_ = active_for(0);
}

int Curriculum::active_for(int stage) const {
  int n = static_cast<int>(kernels_.size());
  if (stage >= stages_ - 1) return n;
  return std::min(n, start_ + stage * step_);
}

void Curriculum::set_stage(int stage, double started) {
  stage_ = std::clamp(stage, 0, stages_ - 1);
  stage_started_ = started;
  active_ = active_for(stage_);
}

bool Curriculum::update(double progress, const std::map<std::string, double>& best) {
  if (stage_ >= stages_ - 1) return false;
  // Each staged step gets an equal share of the staged budget; the threshold may end it sooner.
  double share = fraction_ / (stages_ - 1);
  bool budget_spent = progress >= stage_started_ + share || progress >= fraction_;
  double log_sum = 0;
  bool all_seen = true;
  for (int i = 0; i < active_; ++i) {
    auto it = best.find(kernels_[i].uri);
    if (it == best.end()) {
      all_seen = false;
      break;
    }
    log_sum += std::log(std::max(it->second, 1e-9));
  }
  // Early exploration meets a modest threshold by chance within seconds; a stage lasts at least a
  // quarter of its share so the network sees its kernels before more arrive.
  bool threshold_met =
      all_seen && std::exp(log_sum / active_) >= promote_ && progress >= stage_started_ + share / 4;
  if (!budget_spent && !threshold_met) return false;
  ++stage_;
  stage_started_ = progress;
  active_ = active_for(stage_);
  return true;
}

const std::string& Curriculum::sample(std::mt19937_64& rng) const {
  std::uniform_int_distribution<int> pick(0, active_ - 1);
  return kernels_[pick(rng)].uri;
}

}  // namespace perfdojo::agents
