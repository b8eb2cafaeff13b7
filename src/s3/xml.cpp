// S3's XML answers (src/s3/xml.hpp), read by expat.
#include "xml.hpp"

#include <expat.h>

#include <charconv>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <new>
#include <utility>

namespace ckpt::detail::s3 {

namespace {

// Called at the end of each element with its path from the root (names joined by '/',
// "ListBucketResult/Contents/Key") and the text directly inside it (after its last child).
using element_end = std::function<void(std::string_view path, std::string_view text)>;

// The state of one reading. Nothing thrown crosses expat's C frames: a callback that fails keeps
// the exception and stops the parser.
struct reading {
  XML_Parser parser = nullptr;
  const element_end* on_end = nullptr;
  std::string root{}, path{}, text{};
  std::vector<std::size_t> marks{};  // the path's length before each open element
  std::string failure{};
  std::exception_ptr thrown{};

  void stop(std::string why) {
    if (failure.empty() && !thrown) failure = std::move(why);
    XML_StopParser(parser, XML_FALSE);
  }
  void stop(std::exception_ptr e) {
    if (failure.empty() && !thrown) thrown = std::move(e);
    XML_StopParser(parser, XML_FALSE);
  }
  // Whether the reading stopped (expat may still call a handler or two: an empty element's end).
  [[nodiscard]] bool stopped() const { return !failure.empty() || thrown; }
};

void XMLCALL on_start(void* user, const XML_Char* name, const XML_Char**) {
  auto& r = *static_cast<reading*>(user);
  if (r.stopped()) return;
  try {
    if (r.marks.size() >= max_answer_depth)
      return r.stop("elements nested deeper than " + std::to_string(max_answer_depth) + " levels");
    if (r.marks.empty()) r.root = name;
    r.marks.push_back(r.path.size());
    if (!r.path.empty()) r.path += '/';
    r.path += name;
    r.text.clear();
  } catch (...) {
    r.stop(std::current_exception());
  }
}

void XMLCALL on_close(void* user, const XML_Char*) {
  auto& r = *static_cast<reading*>(user);
  if (r.stopped()) return;
  try {
    (*r.on_end)(r.path, r.text);
    r.path.resize(r.marks.back());
    r.marks.pop_back();
    r.text.clear();
  } catch (...) {
    r.stop(std::current_exception());
  }
}

void XMLCALL on_text(void* user, const XML_Char* text, int length) {
  auto& r = *static_cast<reading*>(user);
  if (r.stopped()) return;
  try {
    r.text.append(text, static_cast<std::size_t>(length));
  } catch (...) {
    r.stop(std::current_exception());
  }
}

void XMLCALL on_doctype(void* user, const XML_Char*, const XML_Char*, const XML_Char*, int) {
  static_cast<reading*>(user)->stop("a document type declaration");
}

struct parser_deleter {
  void operator()(XML_ParserStruct* p) const noexcept { XML_ParserFree(p); }
};

// Reads `body` whole, calling `on_end` at the end of each element; returns the root's name.
std::string read_xml(std::string_view body, const element_end& on_end) {
  while (!body.empty() && (body.front() == ' ' || body.front() == '\t' || body.front() == '\r' || body.front() == '\n'))
    body.remove_prefix(1);
  if (body.empty()) throw bad_answer("the answer is empty, not XML");
  if (body.size() > max_answer_bytes)
    throw bad_answer("the answer is " + std::to_string(body.size()) + " bytes, more than the " +
                     std::to_string(max_answer_bytes) + " read");
  const std::unique_ptr<XML_ParserStruct, parser_deleter> parser(XML_ParserCreate(nullptr));
  if (!parser) throw std::bad_alloc();
  reading r{.parser = parser.get(), .on_end = &on_end};
  XML_SetUserData(parser.get(), &r);
  XML_SetElementHandler(parser.get(), on_start, on_close);
  XML_SetCharacterDataHandler(parser.get(), on_text);
  XML_SetStartDoctypeDeclHandler(parser.get(), on_doctype);
  const XML_Status status = XML_Parse(parser.get(), body.data(), static_cast<int>(body.size()), XML_TRUE);
  if (r.thrown) std::rethrow_exception(r.thrown);
  if (!r.failure.empty()) throw bad_answer("the answer holds " + r.failure);
  if (status != XML_STATUS_OK)
    throw bad_answer(std::string("the answer is not XML: ") + XML_ErrorString(XML_GetErrorCode(parser.get())) +
                     " at line " + std::to_string(XML_GetCurrentLineNumber(parser.get())) + ", column " +
                     std::to_string(XML_GetCurrentColumnNumber(parser.get())));
  return r.root;
}

// What an answer's reader takes from it: an element's path below the root ("Contents/Key"), and
// what to do with its text at its end.
using field = std::pair<std::string_view, std::function<void(std::string_view text)>>;

// Reads `body`, an answer whose root is `root`, handing each of `fields` its text.
void read_fields(std::string_view body, std::string_view root, std::initializer_list<field> fields) {
  const std::string found = read_xml(body, [&](std::string_view path, std::string_view text) {
    if (!path.starts_with(root) || path.size() <= root.size() || path[root.size()] != '/') return;
    path.remove_prefix(root.size() + 1);
    for (const auto& [name, take] : fields)
      if (path == name) take(text);
  });
  if (found != root) throw bad_answer("the answer is a <" + found + ">, not a <" + std::string(root) + ">");
}

bool truth_of(std::string_view text, std::string_view name) {
  if (text == "true") return true;
  if (text == "false") return false;
  throw bad_answer("its " + std::string(name) + " is '" + std::string(text) + "', neither true nor false");
}

std::uint64_t size_of_entry(std::string_view text, std::string_view key) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty())
    throw bad_answer("the size '" + std::string(text) + "' of the key '" + std::string(key) + "' is not a number");
  return value;
}

}  // namespace

error_answer error_in(std::string_view body) {
  if (body.empty()) return {};
  error_answer out;
  try {
    read_fields(body, "Error", {{"Code", [&](std::string_view text) { out.code = text; }},
                                {"Message", [&](std::string_view text) { out.message = text; }}});
    return out;
  } catch (const bad_answer&) {
    return {std::string(), std::string(body.substr(0, 200))};
  }
}

std::string root_of(std::string_view body) {
  return read_xml(body, [](std::string_view, std::string_view) {});
}

list_page list_page_in(std::string_view body) {
  list_page page;
  object_info entry;
  read_fields(body, "ListBucketResult",
              {{"Contents/Key", [&](std::string_view text) { entry.key = text; }},
               {"Contents/Size", [&](std::string_view text) { entry.size = size_of_entry(text, entry.key); }},
               {"Contents/ETag", [&](std::string_view text) { entry.etag = text; }},
               {"Contents",
                [&](std::string_view) {
                  if (entry.key.empty()) throw bad_answer("an entry of the listing names no key");
                  page.objects.push_back(std::exchange(entry, {}));
                }},
               {"IsTruncated", [&](std::string_view text) { page.truncated = truth_of(text, "IsTruncated"); }},
               {"NextContinuationToken", [&](std::string_view text) { page.next_token = text; }}});
  return page;
}

uploads_page uploads_page_in(std::string_view body) {
  uploads_page page;
  upload_info entry;
  read_fields(body, "ListMultipartUploadsResult",
              {{"Upload/Key", [&](std::string_view text) { entry.key = text; }},
               {"Upload/UploadId", [&](std::string_view text) { entry.upload_id = text; }},
               {"Upload",
                [&](std::string_view) {
                  if (entry.key.empty() || entry.upload_id.empty())
                    throw bad_answer("an upload of the listing names no key or no UploadId");
                  page.uploads.push_back(std::exchange(entry, {}));
                }},
               {"IsTruncated", [&](std::string_view text) { page.truncated = truth_of(text, "IsTruncated"); }},
               {"NextKeyMarker", [&](std::string_view text) { page.next_key_marker = text; }},
               {"NextUploadIdMarker", [&](std::string_view text) { page.next_upload_id_marker = text; }}});
  return page;
}

std::string upload_id_in(std::string_view body) {
  std::string id;
  read_fields(body, "InitiateMultipartUploadResult", {{"UploadId", [&](std::string_view text) { id = text; }}});
  if (id.empty()) throw bad_answer("the answer names no UploadId");
  return id;
}

}  // namespace ckpt::detail::s3
