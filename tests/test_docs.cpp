// The guide, docs/guide.md, cannot drift from the API: every ```cpp block in it (and in the other
// documents of `checked_documents`: README.md) is preceded by `<!-- snippet: FILE#NAME -->` and must be,
// character for character, the region of FILE (relative to docs/) between two lines `// [NAME]`,
// with its common indentation removed. The files of docs/examples/ are compiled into this
// executable and their test cases run the regions, so every block of the guide is compiled and
// run. (The load_pytorch block is a region of examples/load_pytorch/main.cpp, which CTest runs as
// example_load_pytorch.)
//
// To rewrite the guide's blocks from the sources after editing them: docs/update_snippets.sh
// (which runs this test with CKPT_UPDATE_SNIPPETS=1).
//
// The test runs in a fresh temporary folder of its own (a global fixture), so that the guide's
// examples can use relative file names.
#define BOOST_TEST_MODULE docs
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#ifndef CKPT_SOURCE_DIR
#error "CKPT_SOURCE_DIR must name the source tree (tests/CMakeLists.txt defines it)"
#endif

namespace {

namespace fs = std::filesystem;

const fs::path docs_dir = fs::path(CKPT_SOURCE_DIR) / "docs";

// The documents whose ```cpp blocks must be marked regions (relative to docs/).
const std::vector<std::string> checked_documents{"guide.md", "../README.md"};

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      lines.emplace_back(text.substr(start));
      break;
    }
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The lines of a region without their common indentation, each ended by '\n'.
std::string dedent(const std::vector<std::string>& lines) {
  std::size_t indent = std::string::npos;
  for (const auto& line : lines) {
    const std::size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos) indent = std::min(indent, first);
  }
  std::string out;
  for (const auto& line : lines) {
    if (line.find_first_not_of(' ') != std::string::npos) out += line.substr(indent);
    out += '\n';
  }
  return out;
}

// The regions of a source file: the lines between two `// [NAME]` lines. Marker lines of other
// regions inside a region are left out of it, so that regions may nest.
std::map<std::string, std::string> regions_of(std::string_view source, const std::string& origin) {
  static const std::regex marker(R"(^\s*// \[([A-Za-z0-9_.-]+)\]\s*$)");
  const std::vector<std::string> lines = split_lines(source);
  std::map<std::string, std::vector<std::size_t>> marks;  // name -> line indices of its markers
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    if (std::regex_match(lines[i], m, marker)) marks[m[1]].push_back(i);
  }
  std::map<std::string, std::string> out;
  for (const auto& [name, at] : marks) {
    if (at.size() != 2)
      throw std::runtime_error(origin + ": the marker '// [" + name + "]' appears " + std::to_string(at.size()) +
                               " times, not twice (once before and once after the region)");
    std::vector<std::string> body;
    for (std::size_t i = at[0] + 1; i < at[1]; ++i) {
      std::smatch m;
      if (!std::regex_match(lines[i], m, marker)) body.push_back(lines[i]);
    }
    out.emplace(name, dedent(body));
  }
  return out;
}

// One fenced code block of the guide.
struct block {
  std::size_t marker_line = 0;  // 1-based line of the `<!-- snippet: ... -->` comment
  std::string file;             // relative to docs/
  std::string name;
  std::size_t first = 0, last = 0;  // 0-based indices of the block's first and past-the-last lines
  std::string text;                 // the lines between the fences, each ended by '\n'
};

// The ```cpp blocks of a guide, each with its marker. Throws, naming the line, on a ```cpp block
// without a marker, a marker not followed by a ```cpp block, a fence without a language, or an
// unclosed fence. Blocks of other languages (sh, json, cmake, text) are not C++ and are not checked.
std::vector<block> blocks_of(std::string_view guide, const std::string& origin) {
  static const std::regex marker(R"(^<!-- snippet: ([^#\s]+)#([A-Za-z0-9_.-]+) -->$)");
  static const std::set<std::string> other_languages{"sh", "json", "cmake", "text"};
  const std::vector<std::string> lines = split_lines(guide);
  std::vector<block> out;
  auto where = [&](std::size_t i) { return origin + ":" + std::to_string(i + 1) + ": "; };
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    const bool is_marker = std::regex_match(lines[i], m, marker);
    if (!is_marker && !lines[i].starts_with("```")) continue;
    block b;
    if (is_marker) {
      b.marker_line = i + 1;
      b.file = m[1];
      b.name = m[2];
      if (i + 1 >= lines.size() || lines[i + 1] != "```cpp")
        throw std::runtime_error(where(i) + "the snippet marker is not followed by a ```cpp line");
      ++i;
    } else if (lines[i] == "```cpp" || lines[i] == "```c++") {
      throw std::runtime_error(where(i) + "a C++ block without a '<!-- snippet: FILE#NAME -->' line before it");
    } else if (!other_languages.contains(lines[i].substr(3))) {
      throw std::runtime_error(where(i) + "a fenced block must be ```cpp (with a snippet marker), ```sh, ```json, "
                                          "```cmake or ```text, not '" + lines[i] + "'");
    }
    const std::size_t open = i;
    do ++i;
    while (i < lines.size() && lines[i] != "```");
    if (i == lines.size()) throw std::runtime_error(where(open) + "the fenced block is not closed");
    if (!is_marker) continue;
    b.first = open + 1;
    b.last = i;
    for (std::size_t j = b.first; j < b.last; ++j) b.text += lines[j] + '\n';
    out.push_back(std::move(b));
  }
  return out;
}

// `guide` with each block's text replaced by `region(block)`.
template <class Region>
std::string rewritten(std::string_view guide, const std::vector<block>& blocks, Region&& region) {
  const std::vector<std::string> lines = split_lines(guide);
  std::string out;
  std::size_t next = 0;
  for (const block& b : blocks) {
    for (; next < b.first; ++next) out += lines[next] + '\n';
    out += region(b);
    next = b.last;
  }
  for (; next < lines.size(); ++next) out += lines[next] + '\n';
  return out;
}

// Reads the regions of the files the guide refers to, once per file.
class sources {
 public:
  explicit sources(fs::path root) : root_(std::move(root)) {}
  const std::string& region(const std::string& file, const std::string& name) {
    auto it = files_.find(file);
    if (it == files_.end())
      it = files_.emplace(file, regions_of(ckpt_test::read_bytes(root_ / file), (root_ / file).string())).first;
    const auto found = it->second.find(name);
    if (found == it->second.end())
      throw std::runtime_error((root_ / file).string() + " has no region '// [" + name + "]'");
    return found->second;
  }

 private:
  fs::path root_;
  std::map<std::string, std::map<std::string, std::string>> files_;
};

// Runs the test module in a fresh temporary folder, removed at the end.
struct in_temporary_folder {
  in_temporary_folder() : previous(fs::current_path()) { fs::current_path(folder.path()); }
  ~in_temporary_folder() { fs::current_path(previous); }
  ckpt_test::temp_dir folder;
  fs::path previous;
};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(in_temporary_folder);

BOOST_AUTO_TEST_SUITE(snippet_machinery)

BOOST_AUTO_TEST_CASE(a_region_is_dedented_and_skips_nested_markers) {
  const std::string source =
      "int f() {\n"
      "  // [outer]\n"
      "  int x = 1;\n"
      "\n"
      "  // [inner]\n"
      "    return x;\n"
      "  // [inner]\n"
      "  // [outer]\n"
      "}\n";
  const auto regions = regions_of(source, "f.cpp");
  BOOST_TEST(regions.at("outer") == "int x = 1;\n\n  return x;\n");
  BOOST_TEST(regions.at("inner") == "return x;\n");
}

BOOST_AUTO_TEST_CASE(an_unmatched_marker_is_refused) {
  BOOST_TEST(ckpt_test::message_of<std::runtime_error>([] { (void)regions_of("// [a]\nint x;\n", "f.cpp"); }) ==
             "f.cpp: the marker '// [a]' appears 1 times, not twice (once before and once after the region)");
}

BOOST_AUTO_TEST_CASE(a_cpp_block_needs_a_marker) {
  BOOST_TEST(ckpt_test::message_of<std::runtime_error>([] { (void)blocks_of("text\n```cpp\nint x;\n```\n", "g.md"); }) ==
             "g.md:2: a C++ block without a '<!-- snippet: FILE#NAME -->' line before it");
  BOOST_TEST(ckpt_test::message_of<std::runtime_error>([] {
               (void)blocks_of("<!-- snippet: a.cpp#x -->\n\n```cpp\n```\n", "g.md");
             }) == "g.md:1: the snippet marker is not followed by a ```cpp line");
  BOOST_TEST(ckpt_test::message_of<std::runtime_error>([] { (void)blocks_of("```\nls\n```\n", "g.md"); }) ==
             "g.md:1: a fenced block must be ```cpp (with a snippet marker), ```sh, ```json, ```cmake or ```text, not '```'");
  BOOST_TEST(blocks_of("```sh\nls\n```\n", "g.md").empty());
}

BOOST_AUTO_TEST_CASE(rewriting_replaces_only_the_blocks) {
  const std::string guide = "# T\n<!-- snippet: a.cpp#x -->\n```cpp\nold();\n```\nafter\n";
  const auto blocks = blocks_of(guide, "g.md");
  BOOST_TEST(blocks.size() == 1u);
  BOOST_TEST(blocks.at(0).text == "old();\n");
  BOOST_TEST(blocks.at(0).file == "a.cpp");
  BOOST_TEST(rewritten(guide, blocks, [](const block&) { return std::string("new();\nmore();\n"); }) ==
             "# T\n<!-- snippet: a.cpp#x -->\n```cpp\nnew();\nmore();\n```\nafter\n");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(guide)

BOOST_AUTO_TEST_CASE(every_block_is_its_marked_region) {
  const char* update = std::getenv("CKPT_UPDATE_SNIPPETS");
  sources regions(docs_dir);
  std::size_t count = 0;
  for (const std::string& document : checked_documents) {
    const fs::path path = docs_dir / document;
    const std::string text = ckpt_test::read_bytes(path);
    const std::vector<block> blocks = blocks_of(text, path.string());
    count += blocks.size();
    if (update && std::string_view(update) == "1") {
      const std::string updated =
          rewritten(text, blocks, [&](const block& b) { return regions.region(b.file, b.name); });
      if (updated != text) {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << updated;
        BOOST_TEST_MESSAGE("rewrote the blocks of " << path.string());
      }
      continue;
    }
    for (const block& b : blocks) {
      BOOST_TEST_CONTEXT("docs/" << document << ":" << b.marker_line << ": " << b.file << "#" << b.name
                                 << " (docs/update_snippets.sh rewrites it)") {
        BOOST_TEST(b.text == regions.region(b.file, b.name));
      }
    }
  }
  BOOST_TEST(count >= 10u);
}

BOOST_AUTO_TEST_CASE(every_region_of_docs_examples_is_shown) {
  std::set<std::string> shown;
  for (const std::string& document : checked_documents) {
    const fs::path path = docs_dir / document;
    for (const block& b : blocks_of(ckpt_test::read_bytes(path), path.string())) shown.insert(b.file + "#" + b.name);
  }
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(docs_dir / "examples")) {
    if (entry.path().extension() != ".cpp") continue;
    ++files;
    const std::string file = "examples/" + entry.path().filename().string();
    for (const auto& [name, text] : regions_of(ckpt_test::read_bytes(entry.path()), entry.path().string()))
      BOOST_TEST(shown.contains(file + "#" + name), file << "#" << name << " is in no block of the documents");
  }
  BOOST_TEST(files >= 1u);
}

BOOST_AUTO_TEST_SUITE_END()
