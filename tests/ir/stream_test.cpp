// The streaming parse: parse_stream's pieces rebuild what parse_program builds, the streaming
// checker, hasher and printer agree with check_program, structural_hash and print_program, reading
// from a stream in pieces changes nothing, and checking a large kernel as it streams holds no body.
#include <malloc.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "doctest/doctest.h"
#include "ir/check.h"
#include "ir/ir.h"
#include "ir/load.h"
#include "ir/parse.h"
#include "ir/print.h"
#include "support/test_files.h"

namespace {

namespace fs = std::filesystem;
using namespace perfdojo::ir;

std::vector<fs::path> files_in(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

using perfdojo::testing::read_text;

/// Writes the pieces down as text, one line per piece, so two streams can be compared.
class Recorder final : public ProgramSink {
 public:
  void declarations(const Program& header) override {
    log += "decls " + std::to_string(header.sizes.size()) + " " +
           std::to_string(header.buffers.size()) + " body " + std::to_string(header.body.size()) +
           "\n";
  }
  void open_scope(int64_t extent, std::string name, Annot annot, SourceLoc loc,
                  ScopeBounds) override {
    log += "open " + std::to_string(extent) + " " + name + " " + annot_name(annot) + " @" +
           std::to_string(loc.line) + ":" + std::to_string(loc.col) + "\n";
  }
  void close_scope() override { log += "close\n"; }
  void statement(Stmt s) override { log += "stmt " + print_stmt(s) + "\n"; }
  std::string log;
};

/// What `perfdojo check` does, through the streaming pieces only.
std::vector<Diagnostic> stream_check(std::istream& in, const std::string& file,
                                     uint64_t* hash = nullptr) {
  CheckedStream sink;
  auto errors = check_stream(in, file, sink);
  if (hash) *hash = sink.hasher.finish();
  return errors;
}

std::string joined(const std::vector<Diagnostic>& errors) {
  std::string s;
  for (const auto& d : errors) s += d.str() + "\n";
  return s;
}

/// An input stream of `count` generated statement lines after a header, made as it is read: the
/// test's own text never sits in memory.
class GeneratedKernel final : public std::streambuf {
 public:
  explicit GeneratedKernel(int64_t count) : left_(count) {
    buf_ =
        "# generated\nN = 64\nM = 48\ninput x: f32[N, M]\noutput z: f32[N, M]\ntemp t: f32[N] = "
        "0\n\n";
    setg(buf_.data(), buf_.data(), buf_.data() + buf_.size());
  }

 protected:
  int_type underflow() override {
    if (left_ <= 0) return traits_type::eof();
    buf_.clear();
    for (int i = 0; i < 256 && left_ > 0; ++i, --left_) {
      const std::string c = std::to_string(left_ % 997) + "." + std::to_string(left_ % 7);
      switch (left_ % 4) {
        case 0:
          buf_ += "N M z[{0},{1}] = x[{0},{1}] * " + c + " + exp(-x[{0},{1}])\n";
          break;
        case 1:
          buf_ += "N M t[{0}] += x[{0},{1}] > " + c + " ? x[{0},{1}] : 0\n";
          break;
        case 2:
          buf_ += "N:par M:vec z[{0},{1}] = max(x[{0},{1}], " + c + ")\n";
          break;
        default:
          buf_ += "| | z[{0},{1}] = z[{0},{1}] / (" + c + " + t[{0}])\n";
          break;
      }
    }
    setg(buf_.data(), buf_.data(), buf_.data() + buf_.size());
    return traits_type::to_int_type(*gptr());
  }

 private:
  std::string buf_;
  int64_t left_;
};

}  // namespace

TEST_CASE("every kernel streams into the pieces of the tree parse_program builds") {
  const auto kernels = files_in(PERFDOJO_KERNEL_DIR, ".pdj");
  REQUIRE(kernels.size() >= 20);
  for (const auto& path : kernels) {
    INFO(path.filename().string());
    const std::string text = read_text(path);
    auto tree = parse_program(text, path.string());
    REQUIRE(tree.ok());
    // The pieces, rebuilt into a tree through parse_file (which streams the file), are the same
    // program, doc comment included.
    auto streamed = parse_file(path.string());
    REQUIRE(streamed.ok());
    CHECK(structurally_equal(*tree, *streamed));
    CHECK(streamed->doc == tree->doc);
    CHECK(print_program(*streamed) == print_program(*tree));
    // The streaming hasher and checker agree with the tree's.
    std::ifstream in(path, std::ios::binary);
    uint64_t hash = 0;
    CHECK(stream_check(in, path.string(), &hash).empty());
    CHECK(hash == structural_hash(*tree));
    // replay hands a tree over in the pieces the parse handed it in.
    Recorder parsed, replayed;
    CHECK(parse_stream(text, path.string(), parsed).empty());
    replay(*tree, replayed);
    CHECK(replayed.log == parsed.log);
    // The streaming printer writes print_program's text.
    std::ostringstream printed;
    StreamPrinter printer(printed);
    CHECK(parse_stream(text, path.string(), printer).empty());
    CHECK(printed.str() == print_program(*tree));
  }
}

TEST_CASE(
    "the pieces come in source order, scopes closed as the bars say, and the declarations first") {
  const std::string text =
      "N = 4\ninput x: f32[N]\noutput y: f32[N]\ntemp a: f32[1] = 0\n\n"
      "N a[0] += x[{0}]\n"
      "| 2 y[{0}] = a[0]\n"
      "| y[{0}] = y[{0}] * 2\n"
      "4:vec y[{0}] = -y[{0}]\n";
  Recorder r;
  CHECK(parse_stream(text, "k.pdj", r).empty());
  CHECK(r.log ==
        "decls 1 3 body 0\n"
        "open 4 N  @6:1\n"
        "stmt a[0] += x[{0}]\n"
        "open 2   @7:3\n"
        "stmt y[{0}] = a[0]\n"
        "close\n"
        "stmt y[{0}] = y[{0}] * 2\n"
        "close\n"
        "open 4  vec @9:1\n"
        "stmt y[{0}] = -y[{0}]\n"
        "close\n");
}

TEST_CASE(
    "after the first error the sink hears nothing more, and later errors are still reported") {
  const std::string text =
      "N = 4\noutput y: f32[N]\n\nN y[{0}] = 1\nN y[{0}] = @\nN y[{0}] = 2\n| | y[0] = 1\n";
  Recorder r;
  auto errors = parse_stream(text, "k.pdj", r);
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].loc.line == 5);
  CHECK(errors[1].loc.line == 7);  // the '|' count is judged against the scopes the text opened
  CHECK(r.log == "decls 1 1 body 0\nopen 4 N  @4:1\nstmt y[{0}] = 1\n");
}

TEST_CASE(
    "streaming check gives every malformed file in tests/data/errors exactly load_file's "
    "diagnostics") {
  const auto inputs = files_in(fs::path(PERFDOJO_TEST_DATA_DIR) / "errors", ".pdj");
  REQUIRE(inputs.size() >= 20);
  for (const auto& input : inputs) {
    INFO(input.filename().string());
    auto loaded = load_file(input.string());
    REQUIRE_FALSE(loaded.ok());
    std::ifstream in(input, std::ios::binary);
    CHECK(joined(stream_check(in, input.string())) == joined(loaded.errors()));
  }
}

TEST_CASE(
    "a stream read in 64 KiB pieces parses as the same text in memory, lines across the seams") {
  // Lines of many lengths, so line ends fall everywhere relative to the 64 KiB pieces.
  std::string text = "N = 8\ninput x: f32[N]\noutput y: f32[N]\n\n8 y[{0}] = x[{0}]\n";
  for (int i = 0; text.size() < 300000; ++i)
    text += "| y[{0}] = y[{0}] + x[{0}]" + std::string(static_cast<size_t>(i % 97), ' ') + " * " +
            std::to_string(i) + "\n";
  text += "4 y[{0}] = 1";  // no newline at the end
  auto mem = parse_program(text, "k.pdj");
  REQUIRE(mem.ok());
  Recorder from_text, from_stream;
  CHECK(parse_stream(text, "k.pdj", from_text).empty());
  std::istringstream in(text);
  CHECK(parse_stream(in, "k.pdj", from_stream).empty());
  CHECK(from_stream.log == from_text.log);
  std::istringstream in2(text);
  uint64_t hash = 0;
  CHECK(stream_check(in2, "k.pdj", &hash).empty());
  CHECK(hash == structural_hash(*mem));
}

TEST_CASE(
    "a line beyond 1 MiB in a stream is skipped unheld, counted, and later lines still parse") {
  std::string text = "output y: f32[4]\n\n1 y[0] = ";
  text += std::string((size_t{3} << 20), '(');
  text += "\n4 y[{0}] = @\n";
  std::istringstream in(text);
  Recorder r;
  auto errors = parse_stream(in, "p.pdj", r);
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].loc.line == 3);
  CHECK(errors[0].message == "line is " + std::to_string((size_t{3} << 20) + 9) +
                                 " bytes; a line holds at most 1048576 (one statement)");
  CHECK(errors[1].loc.line == 4);
}

TEST_CASE("an empty stream and a header alone say the kernel has no statements") {
  for (const std::string& text : {std::string(), std::string("N = 4\noutput y: f32[N]\n")}) {
    std::istringstream in(text);
    Recorder r;
    auto errors = parse_stream(in, "e.pdj", r);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].message == "the kernel has no statements");
    CHECK(r.log.empty());
  }
}

TEST_CASE("checking a large kernel as it streams holds no body: the heap stays flat") {
  // 200,000 statement lines (about 9 MB of text). Kept as a tree, they would take about 2.5 KB
  // each, 500 MB in all; streamed through the checker and the hasher the heap must not grow
  // with them. The heap in use is sampled every 10,000 statements.
  constexpr int64_t kLines = 200000;
  struct Sampling final : ProgramSink {
    void declarations(const Program& h) override { checker.declarations(h); }
    void open_scope(int64_t e, std::string n, Annot a, SourceLoc l, ScopeBounds b) override {
      checker.open_scope(e, std::move(n), a, std::move(l), std::move(b));
    }
    void close_scope() override { checker.close_scope(); }
    void statement(Stmt s) override {
      hasher.statement(s);
      checker.statement(std::move(s));
      if (++count % 10000 == 0) peak = std::max(peak, mallinfo2().uordblks);
    }
    StreamChecker checker;
    StructuralHasher hasher;
    int64_t count = 0;
    size_t peak = 0;
  } sink;
  GeneratedKernel source(kLines);
  std::istream in(&source);
  const size_t before = mallinfo2().uordblks;
  auto errors = parse_stream(in, "gen.pdj", sink);
  CHECK(joined(errors).empty());
  CHECK(joined(sink.checker.finish()).empty());
  CHECK(sink.count == kLines);
  INFO("heap before ", before, " B, peak while streaming ", sink.peak, " B");
  CHECK(sink.peak < before + (size_t{4} << 20));
}
