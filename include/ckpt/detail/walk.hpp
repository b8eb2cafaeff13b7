#pragma once
// Not part of the API (named.hpp's for_each_leaf and `named` are built on it; leafwise.hpp and
// params.hpp call unfilled_structure): the walk of named structures, naming their leaves.
// named.hpp includes it after `fields` and `leaf_subset`, which it needs: not to be included alone.

#include <ckpt/detail/field_names.hpp>
#include <ckpt/leaf.hpp>
#include <ckpt/ptree.hpp>

#include <boost/pfr/core.hpp>

#include <array>
#include <cstddef>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace ckpt::detail {

template <class T>
concept subset = requires(T& x) { leaf_subset<T>::inner(x); };

// The structure a leaf_subset wraps, or `x` itself: walked beside a subset, a plain structure of
// the inner shape lines up leaf by leaf (Adam walks its moments beside the parameters).
template <class X>
auto& subset_inner(X& x) {
  if constexpr (subset<std::remove_cv_t<X>>) return leaf_subset<std::remove_cv_t<X>>::inner(x);
  else return x;
}

template <class T>
concept customized = requires(T& x) {
  fields<T>::names;
  fields<T>::tie(x);
};

template <class T> struct is_std_vector : std::false_type {};
template <class T, class A> struct is_std_vector<std::vector<T, A>> : std::true_type {};
template <class T> struct is_std_array : std::false_type {};
template <class T, std::size_t N> struct is_std_array<std::array<T, N>> : std::true_type {};
template <class T> struct is_string_map : std::false_type {};
template <class V, class C, class A>
struct is_string_map<std::map<std::string, V, C, A>> : std::true_type {};

template <class T>
concept pfr_aggregate = std::is_aggregate_v<T> && std::is_class_v<T> && !std::is_union_v<T>;

// Emits the diagnostic for a type ckpt cannot walk; the instantiation context names the type.
template <class T>
struct not_a_named_structure {
  static_assert(always_false<T>,
                "ckpt: this type (see the instantiation below) is neither a leaf (an Eigen "
                "matrix, array or tensor, a scalar, a ckpt::tensor) nor a named structure (an "
                "aggregate, std::array, std::vector, std::map<std::string, T>, ckpt::ptree). "
                "Specialize ckpt::fields<T> to name its members, or ckpt::leaf_traits<T> to make "
                "it a leaf.");
  static constexpr bool value = false;
};

// Appends one segment to a '.'-joined path for the duration of a scope.
class path_segment {
 public:
  path_segment(std::string& path, std::string_view segment) : path_(path), mark_(path.size()) {
    if (!path_.empty()) path_ += '.';
    path_ += segment;
  }
  path_segment(const path_segment&) = delete;
  path_segment& operator=(const path_segment&) = delete;
  ~path_segment() { path_.resize(mark_); }

 private:
  std::string& path_;
  std::size_t mark_;
};

// Throws std::invalid_argument: "ckpt: the structures differ at '<path>': <what>".
[[noreturn]] void mismatch(const std::string& path, std::string_view what);
// Throws as mismatch, with the sizes of the structures in argument order: "<what> (3, 2)".
[[noreturn]] void size_mismatch(const std::string& path, std::string_view what,
                                std::initializer_list<std::size_t> sizes);

template <class F, class X, class... Xs>
void walk(std::string& path, F& visit, X& x, Xs&... xs);

// One member of a tied or aggregate structure; a function of its own because GCC 12 cannot
// expand the structures' pack inside a fold over the member indices.
template <std::size_t I, class F, class Tuple, class... Tuples>
void walk_tied_member(std::string& path, F& visit, std::string_view name, Tuple&& first, Tuples&&... rest) {
  path_segment segment(path, name);
  walk(path, visit, std::get<I>(first), std::get<I>(rest)...);
}

template <class F, class Tuple, class... Tuples, std::size_t... I>
void walk_tied(std::string& path, F& visit, const auto& names, std::index_sequence<I...>,
               Tuple&& first, Tuples&&... rest) {
  (walk_tied_member<I>(path, visit, names[I], first, rest...), ...);
}

template <std::size_t I, class F, class X, class... Xs>
void walk_aggregate_member(std::string& path, F& visit, X& x, Xs&... xs) {
  path_segment segment(path, field_name<std::remove_cv_t<X>, I>());
  walk(path, visit, boost::pfr::get<I>(x), boost::pfr::get<I>(xs)...);
}

template <class F, class X, class... Xs, std::size_t... I>
void walk_aggregate(std::string& path, F& visit, std::index_sequence<I...>, X& x, Xs&... xs) {
  (walk_aggregate_member<I>(path, visit, x, xs...), ...);
}

template <class F, class X, class... Xs>
void walk_ptree(std::string& path, F& visit, X& x, Xs&... xs) {
  if (((xs.is_dict() != x.is_dict() || xs.is_list() != x.is_list()) || ...))
    mismatch(path, "one ptree node is a dict, list or tensor where another is not");
  if (x.is_tensor()) {
    visit(std::string_view(path), x.as_tensor(), xs.as_tensor()...);
  } else if (x.is_list()) {
    auto& elements = x.as_list();
    if (((xs.as_list().size() != elements.size()) || ...))
      size_mismatch(path, "lists of different lengths", {elements.size(), xs.as_list().size()...});
    for (std::size_t i = 0; i < elements.size(); ++i) {
      path_segment segment(path, std::to_string(i));
      walk(path, visit, elements[i], xs.as_list()[i]...);
    }
  } else {
    auto& entries = x.as_dict();
    if (((xs.as_dict().size() != entries.size()) || ...))
      size_mismatch(path, "dicts of different sizes", {entries.size(), xs.as_dict().size()...});
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (((xs.as_dict()[i].first != entries[i].first) || ...))
        mismatch(path, "dicts with different keys");
      path_segment segment(path, entries[i].first);
      walk(path, visit, entries[i].second, xs.as_dict()[i].second...);
    }
  }
}

template <class F, class X, class... Xs>
void walk(std::string& path, F& visit, X& x, Xs&... xs) {
  using type = std::remove_cv_t<X>;
  if constexpr (leaf<type>) {
    visit(std::string_view(path), x, xs...);
  } else if constexpr (customized<type>) {
    constexpr std::size_t count = std::size(fields<type>::names);
    static_assert(count == std::tuple_size_v<decltype(fields<type>::tie(x))>,
                  "ckpt: fields<T>::names must have exactly one name per member that "
                  "fields<T>::tie returns");
    walk_tied(path, visit, fields<type>::names, std::make_index_sequence<count>{},
              fields<type>::tie(x), fields<type>::tie(xs)...);
  } else if constexpr (subset<type>) {
    // The leaves of the inner structures, those the first one keeps.
    auto kept = [&visit](std::string_view name, auto& leaf, auto&... leaves) {
      if (leaf_subset<type>::keeps(std::as_const(leaf))) visit(name, leaf, leaves...);
    };
    walk(path, kept, leaf_subset<type>::inner(x), subset_inner(xs)...);
  } else if constexpr (std::is_same_v<type, ptree>) {
    walk_ptree(path, visit, x, xs...);
  } else if constexpr (is_std_vector<type>::value || is_std_array<type>::value) {
    if (((xs.size() != x.size()) || ...))
      size_mismatch(path, "sequences of different lengths", {x.size(), xs.size()...});
    for (std::size_t i = 0; i < x.size(); ++i) {
      path_segment segment(path, std::to_string(i));
      walk(path, visit, x[i], xs[i]...);
    }
  } else if constexpr (is_string_map<type>::value) {
    if (((xs.size() != x.size()) || ...)) size_mismatch(path, "maps of different sizes", {x.size(), xs.size()...});
    for (auto& [key, value] : x) {
      if (((!xs.contains(key)) || ...)) mismatch(path, "the key '" + key + "' is not in every map");
      path_segment segment(path, key);
      walk(path, visit, value, xs.find(key)->second...);
    }
  } else if constexpr (pfr_aggregate<type>) {
    walk_aggregate(path, visit, std::make_index_sequence<boost::pfr::tuple_size_v<type>>{}, x, xs...);
  } else {
    static_assert(not_a_named_structure<type>::value);
  }
}

// A structure of `x`'s shape (vector lengths, map keys, ptree nodes, leaf shapes) whose leaves
// are left for the caller to write, every one of them: dynamic Eigen leaves are allocated, not
// copied (see unfilled_like). `fields` and `leaf_subset` structures and ptrees are copied whole,
// since only their owner knows how to build one (a ptree's tensors share their bytes anyway).
template <class T>
T unfilled_structure(const T& x) {
  if constexpr (leaf<T>) {
    return unfilled_like(x);
  } else if constexpr (customized<T> || subset<T> || std::is_same_v<T, ptree>) {
    return x;
  } else if constexpr (is_std_vector<T>::value) {
    T out(x.get_allocator());
    out.reserve(x.size());
    for (const auto& element : x) out.push_back(unfilled_structure(element));
    return out;
  } else if constexpr (is_std_array<T>::value) {
    return [&x]<std::size_t... I>(std::index_sequence<I...>) {
      return T{unfilled_structure(x[I])...};
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (is_string_map<T>::value) {
    T out(x.key_comp(), x.get_allocator());
    for (const auto& [key, value] : x) out.emplace_hint(out.end(), key, unfilled_structure(value));
    return out;
  } else {
    return [&x]<std::size_t... I>(std::index_sequence<I...>) {
      return T{unfilled_structure(boost::pfr::get<I>(x))...};
    }(std::make_index_sequence<boost::pfr::tuple_size_v<T>>{});
  }
}

template <class T>
inline constexpr bool is_named_v = leaf<T> || customized<T> || subset<T> || std::is_same_v<T, ptree> ||
                                   is_std_vector<T>::value || is_std_array<T>::value ||
                                   is_string_map<T>::value || pfr_aggregate<T>;

}  // namespace ckpt::detail
