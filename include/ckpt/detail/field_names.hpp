#pragma once
/// \file
/// Compile-time field names of aggregates: `ckpt::detail::field_name<T, I>()` and
/// `ckpt::detail::field_names<T>()`.
///
/// Boost.PFR gives us the fields of an aggregate but only learned their *names*
/// (`boost::pfr::get_name`, `<boost/pfr/core_name.hpp>`) in Boost 1.84, while the platform we
/// target ships Boost 1.81. So this header forwards to PFR when it can and otherwise uses its own
/// implementation of the same C++20 technique (`fallback_field_name`), which stays available
/// either way so that the tests can check the two against each other.
///
/// The technique, in short: a pointer to a subobject may be a non-type template argument in
/// C++20, and GCC and Clang spell such an argument in `__PRETTY_FUNCTION__` as the access path to
/// the subobject, which ends with the member's identifier. To get such a pointer without ever
/// constructing a `T` we take the address of a field of an `extern` object that is declared but
/// never defined; it is only ever used inside constant evaluation, so nothing refers to it at
/// link time.
///
/// Limits (shared with PFR 1.84): T must be a non-union aggregate without base classes whose
/// fields are not bit-fields (a bit-field has no address) or references; PFR 1.81 reflects at most
/// 100 fields.

#include <boost/pfr/core.hpp>
#include <boost/pfr/tuple_size.hpp>
#include <boost/version.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

// PFR's own field-name reflection needs both the header (Boost >= 1.84) and C++20 support that
// PFR itself judges good enough (it reports that through BOOST_PFR_CORE_NAME_ENABLED). The version
// check guards against a stray core_name.hpp from a partial or mismatched install.
#if defined(__has_include)
#  if __has_include(<boost/pfr/core_name.hpp>) && BOOST_VERSION >= 108400
#    include <boost/pfr/core_name.hpp>
#    if defined(BOOST_PFR_CORE_NAME_ENABLED) && BOOST_PFR_CORE_NAME_ENABLED
#      define CKPT_DETAIL_HAS_PFR_CORE_NAME 1
#    endif
#  endif
#endif
#ifndef CKPT_DETAIL_HAS_PFR_CORE_NAME
/// 1 if `ckpt::detail::field_name` forwards to `boost::pfr::get_name`, 0 if it uses
/// `ckpt::detail::fallback_field_name`.
#  define CKPT_DETAIL_HAS_PFR_CORE_NAME 0
#endif

namespace ckpt::detail {

namespace field_names_impl {

/// Makes a `static_assert` depend on a template parameter, so that it fires only when the
/// template is actually instantiated.
template <class>
inline constexpr bool always_false = false;

// --- The fake object ---------------------------------------------------------------------------

// Declared, never defined: we only take addresses of its fields during constant evaluation, which
// neither reads the object nor makes the linker look for it. This is what lets us name the fields
// of types that are not default constructible (or expensive to construct, like Eigen matrices).
//
// Clang warns about a variable template used without a definition, and, for types in an anonymous
// namespace, about an internal-linkage variable that is never defined. Both are exactly what we
// intend, so silence them around the declaration and the one use (Clang reports them at these
// locations, so the pragmas cover every instantiation).
#if defined(__clang__)
#  pragma clang diagnostic push
#  pragma clang diagnostic ignored "-Wundefined-var-template"
#  pragma clang diagnostic ignored "-Wundefined-internal"
#endif

/// Wraps the fake object. Clang rejects an undefined `extern` variable whose type is a struct from
/// an anonymous namespace ("cannot be defined in any other translation unit because its type
/// does not have linkage"); with a class template specialization as its type it only gives the
/// -Wundefined-internal warning silenced above.
template <class T>
struct fake_object_holder {
  const T value;
};

template <class T>
extern const fake_object_holder<T> fake_object_never_defined;

/// A reference to the fake object of type T; usable only in unevaluated or constant-evaluated
/// contexts that do not read it.
template <class T>
constexpr const T& fake_object() noexcept {
  return fake_object_never_defined<T>.value;
}

#if defined(__clang__)
#  pragma clang diagnostic pop
#endif

// --- From a field to a template argument -------------------------------------------------------

// Clang 14 rejects a pointer to a subobject as a non-type template argument of pointer type
// ("invalid explicitly-specified argument"), but accepts a class-type argument holding one. GCC accepts both; we wrap for both
// compilers so that there is a single code path and only the signature parsing differs.
template <class P>
struct pointer_box {
  P pointer;
};
// Clang 14 lacks class template argument deduction for aggregates, hence an explicit guide.
template <class P>
pointer_box(P) -> pointer_box<P>;

/// The address of the I-th field of the fake T, boxed for use as a template argument. The
/// structured bindings inside PFR's tie_as_tuple give us the fields without naming them.
template <class T, std::size_t I>
consteval auto field_key() noexcept {
  return pointer_box{std::addressof(
      boost::pfr::detail::sequence_tuple::get<I>(boost::pfr::detail::tie_as_tuple(fake_object<T>())))};
}

/// This function's own signature, which spells out Key and so the field's access path. T is part
/// of the signature too, as cheap insurance that keys of different types which a compiler prints
/// alike (Clang prints `{&fake_object_never_defined.value.w}` for every T with a field `w`) never
/// share an instantiation.
///
/// It returns a plain pointer rather than a std::string_view: GCC appends the typedefs a
/// signature mentions ("; std::string_view = ...") after the template arguments, and with no
/// typedef in sight the key is the very last thing in the signature.
template <class T, auto Key>
consteval const char* signature() noexcept {
#if defined(__clang__) || defined(__GNUC__)
  return __PRETTY_FUNCTION__;
#else
  return "";  // Unsupported compiler: fallback_field_name reports it with a static_assert.
#endif
}

// --- Parsing the signature ---------------------------------------------------------------------

/// How a compiler ends `signature<T, pointer_box{&field}>()`'s `__PRETTY_FUNCTION__`: the text
/// right after the field's identifier (the end of the signature), and the text right before it.
struct signature_format {
  bool known;
  std::string_view after_name;
  std::string_view before_name;
};

#if defined(__clang__)
// Clang 14 prints only the member names along the access path, separated by dots:
//   const char *ckpt::detail::field_names_impl::signature()
//       [T = ns::S, Key = {&fake_object_never_defined.value.weight}]
inline constexpr signature_format pretty_function_format{true, "}]", "."};
#elif defined(__GNUC__)
// GCC 12 qualifies each member along the access path with its class:
//   consteval const char* ckpt::detail::field_names_impl::signature() [with T = ns::S; auto Key =
//       pointer_box<const float*>{(& fake_object_never_defined<ns::S>.
//       fake_object_holder<ns::S>::value.ns::S::weight)}]
inline constexpr signature_format pretty_function_format{true, ")}]", "::"};
#else
inline constexpr signature_format pretty_function_format{false, {}, {}};
#endif

/// True for the bytes an identifier may contain. Bytes >= 0x80 are accepted so that UTF-8
/// identifiers (which both compilers allow) survive.
consteval bool is_identifier_byte(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

/// The field identifier in `sig`, or an empty view if `sig` does not have the expected shape.
consteval std::string_view parse_field_name(std::string_view sig, signature_format format) noexcept {
  if (!sig.ends_with(format.after_name)) return {};
  const std::size_t end = sig.size() - format.after_name.size();
  std::size_t begin = end;
  while (begin > 0 && is_identifier_byte(sig[begin - 1])) --begin;
  const std::string_view name = sig.substr(begin, end - begin);
  // An identifier is non-empty, starts with a non-digit, and follows the compiler's separator;
  // anything else means the compiler printed something we do not understand.
  if (name.empty() || (name.front() >= '0' && name.front() <= '9')) return {};
  if (begin < format.before_name.size() ||
      sig.substr(begin - format.before_name.size(), format.before_name.size()) != format.before_name) {
    return {};
  }
  return name;
}

/// The name of the I-th field of T, copied out of the signature into a NUL-terminated array:
/// keeping only the identifier (rather than a view into the whole `__PRETTY_FUNCTION__`) keeps
/// long signatures out of the binary when the name is used at run time.
template <class T, std::size_t I>
consteval auto make_stored_name() noexcept {
  constexpr std::string_view name =
      parse_field_name(signature<T, field_key<T, I>()>(), pretty_function_format);
  static_assert(!name.empty(),
                "ckpt: could not find the field name in __PRETTY_FUNCTION__; this compiler spells "
                "pointer template arguments differently from GCC 12 / Clang 14. Adjust "
                "pretty_function_format in ckpt/detail/field_names.hpp, or use Boost >= 1.84 "
                "whose boost::pfr::get_name is then used instead.");
  std::array<char, name.size() + 1> out{};
  for (std::size_t k = 0; k < name.size(); ++k) out[k] = name[k];
  return out;
}

/// One array per (T, I), shared by every translation unit (inline variable).
template <class T, std::size_t I>
inline constexpr auto stored_name = make_stored_name<T, I>();

/// A struct with a known field name, to check the parser end to end before trusting it. It is a
/// template only so that the check below is instantiated on use, not on inclusion.
template <class>
struct parser_self_check {
  int ckpt_self_check_field_1;
  float second;
};

/// The checks every entry point makes, so that misuse reports a ckpt message before PFR's.
/// Returns whether T passed; callers stop on false so that only the first problem is reported
/// instead of a cascade of PFR errors.
template <class T>
consteval bool check_reflectable() noexcept {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_reference_v<T>) {
    static_assert(always_false<T>,
                  "ckpt: field names need a struct type, not a reference; use std::remove_cvref_t<T>.");
    return false;
  } else if constexpr (std::is_union_v<U>) {
    static_assert(always_false<T>,
                  "ckpt: field names of a union are meaningless (only one member is alive); wrap "
                  "the data in a struct instead.");
    return false;
  } else if constexpr (std::is_array_v<U>) {
    static_assert(always_false<T>,
                  "ckpt: a C array has no field names; wrap it in a struct with a named member.");
    return false;
  } else if constexpr (!std::is_class_v<U> || !std::is_aggregate_v<U>) {
    static_assert(always_false<T>,
                  "ckpt: field names need an aggregate struct (no user-declared constructors, no "
                  "virtual functions, no private or protected data members); remove those or "
                  "reflect a plain struct that mirrors it.");
    return false;
  } else if constexpr (!BOOST_PFR_USE_CPP17) {
    static_assert(always_false<T>,
                  "ckpt: field names need Boost.PFR's structured-binding engine; do not define "
                  "BOOST_PFR_USE_CPP17 to 0.");
    return false;
  } else {
    return true;
  }
}

/// check_reflectable, and that I names a field of T: what both field_name and
/// fallback_field_name check first. Returns whether they passed.
template <class T, std::size_t I>
consteval bool check_field_index() noexcept {
  if constexpr (!check_reflectable<T>()) {
    return false;
  } else if constexpr (I >= boost::pfr::tuple_size_v<T>) {
    // Stop here so that this is the only error, rather than the first of many from PFR.
    static_assert(always_false<T>, "ckpt: field index out of range; I must be less than boost::pfr::tuple_size_v<T>.");
    return false;
  } else {
    return true;
  }
}

}  // namespace field_names_impl

/// The identifier of the I-th field (0-based, in declaration order) of the aggregate T, computed
/// by ckpt's own parser of `__PRETTY_FUNCTION__` (GCC and Clang only), whatever the Boost
/// version. Prefer field_name(), which uses Boost.PFR's implementation when available; this one
/// is public so that tests can compare the two.
///
/// T need not be default constructible: no T is ever created. The returned view refers to a
/// static NUL-terminated array and is valid for the whole program.
/// \tparam T a (possibly cv-qualified) non-union aggregate without bases, bit-fields or
///   reference members
/// \tparam I the field's index, less than `boost::pfr::tuple_size_v<T>`
/// \throws nothing
template <class T, std::size_t I>
constexpr std::string_view fallback_field_name() noexcept {
  namespace impl = field_names_impl;
  if constexpr (!impl::check_field_index<T, I>()) {
    return {};
  } else if constexpr (!impl::pretty_function_format.known) {
    static_assert(impl::always_false<T>,
                  "ckpt: ckpt's own field-name reflection supports only GCC and Clang (it parses "
                  "__PRETTY_FUNCTION__); build with one of them, or install Boost >= 1.84 and "
                  "call field_name(), which then forwards to boost::pfr::get_name.");
    return {};
  } else {
    // Verify the parser on a field whose name we know, so that a compiler that prints something
    // subtly different fails here instead of silently returning wrong names.
    static_assert(std::string_view{impl::stored_name<impl::parser_self_check<T>, 0>.data()} ==
                          "ckpt_self_check_field_1" &&
                      std::string_view{impl::stored_name<impl::parser_self_check<T>, 1>.data()} == "second",
                  "ckpt: the __PRETTY_FUNCTION__ parser returns wrong field names on this compiler; "
                  "adjust pretty_function_format in ckpt/detail/field_names.hpp, or use Boost >= "
                  "1.84 whose boost::pfr::get_name is then used instead.");
    using U = std::remove_cv_t<T>;
    return {impl::stored_name<U, I>.data(), impl::stored_name<U, I>.size() - 1};
  }
}

/// The identifier of the I-th field (0-based, in declaration order) of the aggregate T, e.g.
/// `"weight"` for the first field of `struct layer { Eigen::MatrixXf weight; ... }`.
///
/// Uses `boost::pfr::get_name` when Boost >= 1.84 provides it (CKPT_DETAIL_HAS_PFR_CORE_NAME is
/// 1), fallback_field_name() otherwise; both give the same result. Usable in constant
/// expressions. T need not be default constructible: no T is ever created. The returned view
/// refers to static storage and is valid for the whole program.
/// \tparam T a (possibly cv-qualified) non-union aggregate without bases, bit-fields or
///   reference members
/// \tparam I the field's index, less than `boost::pfr::tuple_size_v<T>`
/// \throws nothing
template <class T, std::size_t I>
constexpr std::string_view field_name() noexcept {
#if CKPT_DETAIL_HAS_PFR_CORE_NAME
  if constexpr (!field_names_impl::check_field_index<T, I>()) {
    return {};
  } else {
    return std::string_view{boost::pfr::get_name<I, std::remove_cv_t<T>>()};
  }
#else
  return fallback_field_name<T, I>();
#endif
}

namespace field_names_impl {
template <class T, std::size_t... I>
constexpr std::array<std::string_view, sizeof...(I)> field_names(std::index_sequence<I...>) noexcept {
  return {ckpt::detail::field_name<T, I>()...};
}
}  // namespace field_names_impl

/// The identifiers of all fields of the aggregate T, in declaration order: element I is
/// `field_name<T, I>()`. Usable in constant expressions; T need not be default constructible.
/// \tparam T a (possibly cv-qualified) non-union aggregate without bases, bit-fields or
///   reference members
/// \throws nothing
template <class T>
constexpr std::array<std::string_view, boost::pfr::tuple_size_v<T>> field_names() noexcept {
  if constexpr (!field_names_impl::check_reflectable<T>()) {
    return {};
  } else {
    return field_names_impl::field_names<T>(std::make_index_sequence<boost::pfr::tuple_size_v<T>>{});
  }
}

}  // namespace ckpt::detail
