#pragma once
/// \file
/// Reading PyTorch `torch.save` files (`pytorch_model.bin`, `*.pt`, optimizer state dicts) into
/// a `ckpt::checkpoint`, without Python and without running any of the file's pickled code.
/// `ckpt::load` and `ckpt::parse` (ckpt/file.hpp) recognize such a file by its content, not its
/// name, and read it as this file says; the overloads here take the reader's options.
///
/// What is read: the zip-based format `torch.save` has written since PyTorch 1.6 (a zip holding
/// `<name>/data.pkl`, the pickled object, and `<name>/data/<key>`, one record a storage, stored
/// uncompressed; a `<name>/byteorder` record, when present, says whether storages are little- or
/// big-endian). A file of the format before (a bare pickle, from PyTorch before 1.6) is
/// recognized and refused with a message that says so. The pickle is read by a restricted
/// unpickler that knows only the opcodes of pickle protocol 2 that `torch.save` emits and only
/// these globals:
/// `collections.OrderedDict`, `torch._utils._rebuild_tensor_v2`,
/// `torch._utils._rebuild_parameter`, `torch.device` and the typed storage classes
/// (`torch.FloatStorage`, `torch.BFloat16Storage`, ...). Any other global, opcode or call is
/// refused before anything is built: nothing in the file is ever executed, so a malicious file
/// can fail to load but cannot do anything else.
///
/// How the object becomes a checkpoint: the root must be a dict (a `state_dict`, an optimizer's
/// `state_dict`, or any nesting of dicts, lists and tuples). Each tensor becomes an entry named
/// by its path of keys joined with "." (dict keys that are strings or integers; list and tuple
/// items by index): `{"state": {0: {"exp_avg": t}}}` gives `state.0.exp_avg`. Every other leaf
/// value (an integer, a float, a bool, a string, None) goes into the checkpoint's metadata under
/// its path, as text (`param_groups.0.lr` → `"0.001"`, True → `"true"`, None → `"none"`).
/// Tensors that share a storage, tensors with a storage offset, and non-contiguous ones (from
/// `.t()`, slicing) come out as ordinary C-order tensors. Contiguous little-endian tensors view
/// the file's mapping without a copy, like the entries of `load`.
///
/// **Tied weights.** Names that reach the same tensor (the same view of the same storage: one
/// `Parameter` under two names, as `lm_head.weight` tied to `transformer.wte.weight`) are *tied*.
/// By default every name is kept, each an entry viewing the same bytes; `torch_options::tied`
/// reports each group, and `keep_tied = false` keeps only the first name of each group in the
/// file's order, as `transformers`' `save_pretrained` does when it writes safetensors. Different
/// views of one storage (slices, a transpose) are not tied: each keeps its name and its data.
///
/// **Budgets.** What a small file can make the reader build is bounded in proportion to the
/// file, so that a crafted file fails with a `format_error` naming the budget instead of
/// taking memory or output without end (see `torch_options`): names (a key reused at every
/// level of a deep nesting), tensor bytes (many names on one storage, or an expand of a small
/// one), and the unpickler's objects. Files `torch.save` writes stay far below every budget.

#include <ckpt/checkpoint.hpp>
#include <ckpt/error.hpp>
#include <ckpt/file.hpp>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace ckpt {

/// How `load` and `parse` read a `torch.save` file: its budgets and what becomes of tied names.
///
/// Each budget is a number of bytes per byte of the input plus a fixed allowance; a file that
/// needs more is refused with a `format_error` naming the budget (`torch_options::<name>`).
/// Raise the factor to read such a file if you trust it; the `ckpt` tool multiplies all three
/// with `--torch-budget FACTOR`.
struct torch_options {
  /// The names built for entries and metadata, each partial path on the way counted too, may
  /// total this many bytes per byte of the pickle (`data.pkl`), plus 1 MiB.
  std::size_t name_budget = 16;
  /// The entries' tensor bytes (each name counted, views of the file included) and the copies
  /// made of strided or expanded views may total this many bytes per byte of the file, plus
  /// 16 MiB. Tied names count once each: a few are far below it; thousands of names on one
  /// storage are not.
  std::size_t data_budget = 16;
  /// The objects the restricted unpickler builds (each at its size in memory, strings, lists,
  /// dicts and the memo with their contents, whether the result keeps them or not) may take this
  /// many bytes per byte of the pickle, plus 64 MiB.
  std::size_t object_budget = 64;
  /// Keep every name of a tied group (true), or only the first in the file's order (false, what
  /// `transformers` writes to safetensors).
  bool keep_tied = true;
  /// If set, called once for each group of tied names (two or more, in the file's order, the one
  /// `keep_tied = false` keeps first), after the file is read.
  std::function<void(const std::vector<std::string>& names)> tied = {};
};

/// `ckpt::load` (ckpt/file.hpp), with the options of the `torch.save` reader: every file `load`
/// finds to be a `torch.save` file (by its content: a file given, a folder's `pytorch_model.bin`,
/// the shards of a `pytorch_model.bin.index.json`) is read with `torch` (see this file's
/// documentation for what is read and how it is named); safetensors files with `options`.
/// `ckpt::load(path, options)` is this with `torch_options{}`. The `load_options` do not apply to
/// `torch.save` files (they record no digest). A `torch.save` file is mapped read-only and stays
/// mapped while any tensor of it lives.
/// \throws as `ckpt::load`; for a `torch.save` file, io_error if it cannot be opened or read, and
///   format_error (reading `ckpt: '<file>' is not a readable PyTorch file: <broken rule>`) if it
///   is of the format before PyTorch 1.6, holds a global, opcode or call outside the allow-list
///   (the message names it), needs more than a budget of `torch` allows (the message names the
///   budget), or is malformed in any way (truncated, a record out of bounds or compressed, a
///   tensor past its storage...). A path that is not a regular file (a FIFO, a device) cannot be
///   told a `torch.save` file by its content: `load` refuses it without waiting on it, as a
///   safetensors file.
[[nodiscard]] checkpoint load(const std::filesystem::path& path, const load_options& options,
                              const torch_options& torch);

/// `ckpt::parse` (ckpt/file.hpp), with the options of the `torch.save` reader: bytes it finds to
/// be a `torch.save` file (by their content) are read with `torch` into a checkpoint that owns a
/// copy of them; safetensors bytes with `options`. `ckpt::parse(file_bytes, origin, options)` is
/// this with `torch_options{}`. `origin` names the bytes in error messages.
/// \throws as `ckpt::parse`; for `torch.save` bytes, format_error as `load` above.
[[nodiscard]] checkpoint parse(std::span<const std::byte> file_bytes, const std::filesystem::path& origin,
                               const load_options& options, const torch_options& torch);

}  // namespace ckpt
