#pragma once
/// \file
/// The whole of ckpt: include this, or only the header you need.
///
/// - ckpt/dtype.hpp       element types of the format
/// - ckpt/error.hpp       the exceptions for I/O and format failures
/// - ckpt/tensor.hpp      one immutable entry
/// - ckpt/checkpoint.hpp  the immutable collection of entries (no templates: the small core)
/// - ckpt/file.hpp        save and load
/// - ckpt/name_pattern.hpp regular expressions over entry names (select, drop, rename, load_options::only)
/// - ckpt/leaf.hpp        Eigen objects and scalars as entries
/// - ckpt/ptree.hpp       run-time parameter trees
/// - ckpt/named.hpp       walking and naming structures; the ckpt::fields customization point
/// - ckpt/params.hpp      of_params / to_params
/// - ckpt/section.hpp     section and save(path, {sections}): live structures, no snapshot
/// - ckpt/snapshot.hpp    snapshots of live structures into reused memory (for async saves)
/// - ckpt/view.hpp        zero-copy Eigen views of entries
/// - ckpt/leafwise.hpp    leaf-by-leaf operations for an optimizer of your own (zeros_like, zip_leaves)
/// - ckpt/adam.hpp        the Adam optimizer and its training-state sections
/// - ckpt/manager.hpp     a folder of step-numbered checkpoints for training loops
/// - ckpt/sharded.hpp     Hugging Face sharded checkpoints (index + shards)
/// - ckpt/adapt.hpp       adapters for foreign checkpoints: rename, transpose, split; cast and its rules
/// - ckpt/torch.hpp       PyTorch torch.save files (pytorch_model.bin, *.pt) read without Python
/// - ckpt/version.hpp     CKPT_VERSION_MAJOR, _MINOR, _PATCH and CKPT_VERSION_STRING (generated)

#include <ckpt/adam.hpp>
#include <ckpt/adapt.hpp>
#include <ckpt/checkpoint.hpp>
#include <ckpt/dtype.hpp>
#include <ckpt/error.hpp>
#include <ckpt/file.hpp>
#include <ckpt/name_pattern.hpp>
#include <ckpt/leaf.hpp>
#include <ckpt/leafwise.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/named.hpp>
#include <ckpt/params.hpp>
#include <ckpt/ptree.hpp>
#include <ckpt/section.hpp>
#include <ckpt/sharded.hpp>
#include <ckpt/snapshot.hpp>
#include <ckpt/tensor.hpp>
#include <ckpt/torch.hpp>
#include <ckpt/version.hpp>
#include <ckpt/view.hpp>
