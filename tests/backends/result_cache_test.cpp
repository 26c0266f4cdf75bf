// The on-disk result cache: round trips, keys, and entries that must read as misses.
#include "backends/result_cache.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

using namespace perfdojo::backends;

namespace {

namespace fs = std::filesystem;

struct CacheDir {
  std::string path;
  CacheDir() {
    std::string t = (fs::temp_directory_path() / "perfdojo-cache-test-XXXXXX").string();
    std::vector<char> buf(t.begin(), t.end());
    buf.push_back('\0');
    REQUIRE(mkdtemp(buf.data()) != nullptr);
    path = buf.data();
  }
  ~CacheDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

CacheKey key() { return {0x1234abcdULL, "x86_64", "cc -O3", "Some CPU [flags 0]", 7, "c1 verify"}; }

Measurement sample() {
  Measurement m;
  m.median_s = 1.25e-3;
  m.min_s = 1.125e-3;
  m.spread = 0.015625;
  m.reps = 9;
  m.verified = true;
  m.max_rel_error = 3.5e-7;
  m.compile_s = 0.2;
  m.flags = "cc -O3 -march=native";
  return m;
}

}  // namespace

TEST_CASE("a stored measurement reads back exactly, marked cached and without compile time") {
  CacheDir dir;
  ResultCache cache(dir.path);
  CHECK_FALSE(cache.lookup(key()));
  cache.store(key(), sample());
  auto m = cache.lookup(key());
  REQUIRE(m);
  CHECK(m->cached);
  CHECK(m->median_s == sample().median_s);
  CHECK(m->min_s == sample().min_s);
  CHECK(m->spread == sample().spread);
  CHECK(m->reps == 9);
  CHECK(m->verified);
  CHECK(m->max_rel_error == sample().max_rel_error);
  CHECK(m->flags == sample().flags);
  CHECK(m->compile_s == 0);
}

TEST_CASE("every part of the key tells entries apart") {
  CacheDir dir;
  ResultCache cache(dir.path);
  cache.store(key(), sample());
  auto k = key();
  k.seed = 8;
  CHECK_FALSE(cache.lookup(k));
  k = key();
  k.flags = "cc -O2";
  CHECK_FALSE(cache.lookup(k));
  k = key();
  k.cpu = "Other CPU";
  CHECK_FALSE(cache.lookup(k));
  k = key();
  k.program_hash ^= 1;
  CHECK_FALSE(cache.lookup(k));
  k = key();
  k.variant = "c1 noverify";
  CHECK_FALSE(cache.lookup(k));
  k = key();
  k.backend = "x86_avx2";
  CHECK_FALSE(cache.lookup(k));
  CHECK(cache.lookup(key()));
}

TEST_CASE("corrupt, truncated or foreign entries are misses, not errors") {
  CacheDir dir;
  ResultCache cache(dir.path);
  cache.store(key(), sample());
  std::string path = cache.path_of(key());
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(text.find("end ok") != std::string::npos);
  auto rewrite = [&](const std::string& t) {
    std::ofstream out(path, std::ios::trunc);
    out << t;
  };
  rewrite(text.substr(0, text.size() / 2));
  CHECK_FALSE(cache.lookup(key()));
  rewrite("garbage\n\x01\x02");
  CHECK_FALSE(cache.lookup(key()));
  std::string bad = text;
  bad.replace(bad.find("median_s ") + 9, 3, "x!y");
  rewrite(bad);
  CHECK_FALSE(cache.lookup(key()));
  std::string other = text;
  other.replace(other.find("seed=7"), 6, "seed=9");  // another key stored under this name
  rewrite(other);
  CHECK_FALSE(cache.lookup(key()));
  rewrite(text);
  CHECK(cache.lookup(key()));
}

TEST_CASE("failed measurements are not stored, and an empty directory disables the cache") {
  CacheDir dir;
  ResultCache cache(dir.path);
  Measurement failed = sample();
  failed.error = "the kernel crashed";
  cache.store(key(), failed);
  CHECK_FALSE(cache.lookup(key()));
  ResultCache off("");
  CHECK_FALSE(off.enabled());
  off.store(key(), sample());
  CHECK_FALSE(off.lookup(key()));
}

TEST_CASE("the CPU identity names the model and is stable") {
  std::string id = cpu_identity();
  CHECK_FALSE(id.empty());
  CHECK(id.find("[flags ") != std::string::npos);
  CHECK(cpu_identity() == id);
}
