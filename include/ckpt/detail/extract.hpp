#pragma once
// Not part of the API (params.hpp's to_params and read_params of a structure call it): their read,
// on the one read of read_plan.hpp. params.hpp includes it after extract_options and read_report,
// which it needs: not to be included on its own.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/read_plan.hpp>

#include <string_view>

namespace ckpt::detail {

// `read_params` of one structure, and the copy-free `to_params`: the plan of its leaves under
// `opts.prefix`. `in_place` for read_params: its leaves keep values, and it is strict by default,
// the read of the one section {params, opts.prefix} (ckpt/section.hpp); to_params's leaves are
// unfilled, and it is lenient by default (Kaun's rule).
template <class P>
read_report extract(const checkpoint& t, P& params, const extract_options& opts, std::string_view function,
                    bool in_place) {
  read_plan plan;
  plan.keeps_values = in_place;
  // Room for as many leaves as `t` has entries, which a template usually reads most of: 100,000
  // leaves are not moved as the list grows.
  plan.leaves.reserve(t.size());
  add_leaf_reads(plan.leaves, params, opts.prefix);
  plan.prefixes.emplace_back(opts.prefix);
  return read_planned(t, plan, opts, function, /*strict=*/in_place);
}

}  // namespace ckpt::detail
