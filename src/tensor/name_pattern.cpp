// ckpt::name_pattern, select and drop (include/ckpt/name_pattern.hpp): regular expressions over entry names, run by RE2,
// whose matching needs time linear in the text and no recursion (std::regex recurses once per
// character and overflowed the stack on a name of 40,000 characters: issue 25).
#include <ckpt/name_pattern.hpp>

#include <re2/re2.h>

#include <cctype>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ckpt {

namespace detail {

struct compiled_pattern {
  std::string pattern;
  re2::RE2 re;

  static re2::RE2::Options options() {
    re2::RE2::Options o;
    o.set_log_errors(false);  // the reason goes into the exception, not to stderr
    return o;
  }
  explicit compiled_pattern(std::string_view p) : pattern(p), re(re2::StringPiece(p.data(), p.size()), options()) {}
};

}  // namespace detail

namespace {

// The ECMAScript replacement syntax ($1, $&, $$; a backslash literal) in RE2's (\1, \0, \\).
std::string rewrite_of(std::string_view replacement) {
  std::string out;
  out.reserve(replacement.size() + 8);
  for (std::size_t i = 0; i < replacement.size(); ++i) {
    const char c = replacement[i];
    const char next = i + 1 < replacement.size() ? replacement[i + 1] : '\0';
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '$' && std::isdigit(static_cast<unsigned char>(next))) {
      out += '\\';
      out += next;
      ++i;
    } else if (c == '$' && next == '&') {
      out += "\\0";
      ++i;
    } else if (c == '$' && next == '$') {
      out += '$';
      ++i;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

name_pattern::name_pattern(std::string_view pattern) {
  auto compiled = std::make_shared<detail::compiled_pattern>(pattern);
  if (!compiled->re.ok())
    throw std::invalid_argument("ckpt: the regular expression '" + std::string(pattern) +
                                "' is invalid: " + compiled->re.error());
  compiled_ = std::move(compiled);
}

const std::string& name_pattern::pattern() const noexcept { return compiled_->pattern; }

bool name_pattern::matches(std::string_view name) const noexcept {
  return re2::RE2::PartialMatch(re2::StringPiece(name.data(), name.size()), compiled_->re);
}

std::string name_pattern::replace(std::string_view name, std::string_view replacement) const {
  const std::string rewrite = rewrite_of(replacement);
  std::string why;
  if (!compiled_->re.CheckRewriteString(rewrite, &why))
    throw std::invalid_argument("ckpt: the replacement '" + std::string(replacement) +
                                "' does not fit the regular expression '" + compiled_->pattern + "': " + why);
  std::string out(name);
  re2::RE2::GlobalReplace(&out, compiled_->re, rewrite);
  return out;
}

namespace {

checkpoint entries_where(const checkpoint& t, const name_pattern& pattern, bool matching) {
  std::vector<checkpoint::entry> entries;
  for (const auto& e : t)
    if (pattern.matches(e.first) == matching) entries.push_back(e);
  return checkpoint(std::move(entries), t.metadata());
}

}  // namespace

checkpoint select(const checkpoint& t, const name_pattern& pattern) { return entries_where(t, pattern, true); }

checkpoint drop(const checkpoint& t, const name_pattern& pattern) { return entries_where(t, pattern, false); }

}  // namespace ckpt
