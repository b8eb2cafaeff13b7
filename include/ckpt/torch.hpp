#pragma once
/// \file
/// Reading PyTorch `torch.save` files (`pytorch_model.bin`, `*.pt`, optimizer state dicts) into
/// a `ckpt::checkpoint`, without Python and without running any of the file's pickled code.
///
/// What is read: the zip-based format `torch.save` has written since PyTorch 1.6 (a zip holding
/// `<name>/data.pkl`, the pickled object, and `<name>/data/<key>`, one record a storage, stored
/// uncompressed; a `<name>/byteorder` record, when present, says whether storages are little- or
/// big-endian). The pickle is read by a restricted unpickler that knows only the opcodes of
/// pickle protocol 2 that `torch.save` emits and only these globals:
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

#include <ckpt/checkpoint.hpp>
#include <ckpt/error.hpp>

#include <cstddef>
#include <filesystem>
#include <span>

namespace ckpt {

/// The checkpoint stored in the `torch.save` file at `path` (see the file's documentation for
/// what is read and how it is named). The file is mapped read-only and stays mapped while any
/// tensor of it lives.
/// \throws io_error if the file cannot be opened or read.
/// \throws torch_format_error if the file is not a zip-based `torch.save` file, holds a global,
/// opcode or call outside the allow-list (the message names it), or is malformed in any way
/// (truncated, a record out of bounds or compressed, a tensor past its storage...).
[[nodiscard]] checkpoint load_torch(const std::filesystem::path& path);

/// The checkpoint in the `torch.save` file whose bytes are `file_bytes` (copied first, so the
/// checkpoint owns its data); `origin` names the file in error messages.
/// \throws torch_format_error as `load_torch`.
[[nodiscard]] checkpoint parse_torch(std::span<const std::byte> file_bytes, const std::filesystem::path& origin);

/// True if `file_bytes` begins as a zip file does (a `torch.save` file is one), so that it is
/// worth `parse_torch`; a safetensors file never does.
/// \throws nothing
[[nodiscard]] bool looks_like_torch(std::span<const std::byte> file_bytes) noexcept;

}  // namespace ckpt
