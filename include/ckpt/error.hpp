#pragma once
/// \file
/// The exceptions ckpt throws for I/O and format failures (Kaun's `Failure`).
///
/// Misuse of the API (a missing entry, a shape or dtype mismatch, a bad name) throws
/// `std::invalid_argument` (Kaun's `Invalid_argument`); what goes wrong with a file
/// throws a `ckpt::error`, whose message names the file.

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

// The constructors, which build the messages, and the destructors are compiled in src/base/error.cpp:
// each destructor, the class's first virtual function defined out of line, is its key function,
// so that its vtable and type information are emitted once, in the library, and not in every
// file that throws or catches it.

namespace ckpt {

/// Base of ckpt's failures: a file could not be read, written or understood.
class error : public std::runtime_error {
 public:
  /// \param path the file concerned; \param what the full message (naming the file).
  error(std::filesystem::path path, const std::string& what);
  ~error() override;
  /// The file the failure concerns.
  /// \throws nothing
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

/// The operating system refused an operation (open, read, write, fsync, rename...).
/// The message reads `ckpt: cannot <operation> '<path>': <system error>`.
class io_error : public error {
 public:
  /// \param path the file; \param operation what was attempted ("open", "write"...);
  /// \param code the system error.
  io_error(std::filesystem::path path, const std::string& operation, std::error_code code);
  ~io_error() override;
  /// The system error.
  /// \throws nothing
  [[nodiscard]] std::error_code code() const noexcept { return code_; }

 private:
  std::error_code code_;
};

/// A file is not a valid checkpoint file: not a valid safetensors file, or a sharded checkpoint's
/// index that is not valid, or a `torch.save` file ckpt cannot read (ckpt/torch.hpp). The message
/// names the file, what it was read as, and the broken rule:
/// `ckpt: '<path>' is not a valid safetensors file: <broken rule>`, or
/// `ckpt: '<index>' is not a valid sharded checkpoint index: <broken rule>` (the rule naming the
/// entry and the shard file where there is one), or
/// `ckpt: '<path>' is not a readable PyTorch file: <broken rule>` (naming the record, opcode,
/// global or budget). One handler catches them all; `rule()` gives the broken rule alone.
class format_error : public error {
 public:
  /// \param path the file; \param rule the rule the file breaks, naming the entry if any.
  format_error(std::filesystem::path path, const std::string& rule);
  ~format_error() override;
  /// The broken rule alone, without the file name.
  /// \throws nothing
  [[nodiscard]] const std::string& rule() const noexcept { return rule_; }

 protected:
  /// For subclasses with a message of their own (the library's, for an index or a `torch.save`
  /// file): \param path the file; \param rule the broken rule alone; \param what the full
  /// message (naming the file).
  format_error(std::filesystem::path path, std::string rule, const std::string& what);

 private:
  std::string rule_;
};

/// A file does not match the digest recorded in its `__metadata__` (`ckpt.xxh3_64_file`, which
/// covers the whole file: header and data; see `ckpt::save`): its bytes changed after they were
/// written (a flipped bit on disk, a truncated copy patched up, a tool that edited the header or
/// the data). The message reads `ckpt: '<path>' is corrupted: its bytes hash to <computed> but its __metadata__
/// entry '<key>' records <expected>`.
class integrity_error : public format_error {
 public:
  /// \param path the file; \param key the metadata key of the digest; \param expected the digest
  /// the file records; \param computed the digest of the file as read.
  integrity_error(std::filesystem::path path, const std::string& key, const std::string& expected,
                  const std::string& computed);
  ~integrity_error() override;
  /// The digest recorded in the file (16 lowercase hex digits).
  /// \throws nothing
  [[nodiscard]] const std::string& expected() const noexcept { return expected_; }
  /// The digest of the file as read (16 lowercase hex digits).
  /// \throws nothing
  [[nodiscard]] const std::string& computed() const noexcept { return computed_; }

 protected:
  /// For the library's subclass with a message of its own (bytes that changed after the file's
  /// digest was verified): \param path the file; \param expected and \param computed the hashes
  /// as verified and as read; \param rule the broken rule alone; \param what the full message.
  integrity_error(std::filesystem::path path, std::string expected, std::string computed, std::string rule,
                  const std::string& what);

 private:
  std::string expected_;
  std::string computed_;
};

/// Another `checkpoint_manager` (in this or another process) holds the folder's lock. The
/// message reads `ckpt: the checkpoint folder '<folder>' is in use by another
/// checkpoint_manager (lock file '<lock file>')`.
class lock_error : public error {
 public:
  /// \param folder the checkpoint folder; \param lock_file the lock file in it.
  lock_error(const std::filesystem::path& folder, const std::filesystem::path& lock_file);
  ~lock_error() override;
};

/// A request to object storage (a checkpoint at `s3://bucket/key`) was refused by the server, or
/// failed after every retry (the failures that may pass, a dropped connection, a 5xx, throttling,
/// are retried with backoff, bounded in tries and time). The message reads
/// `ckpt: s3: <METHOD> 's3://bucket/key' failed: HTTP <status> <code>: <the server's message>`,
/// with ` (after N tries)` when retries ran out, or the transport's error with status 0. A network
/// failure is never damage: a manager's resume does not go back to an older step because of it.
class remote_error : public error {
 public:
  /// \param url the object (or bucket) concerned; \param method the HTTP method; \param status
  /// the HTTP status (0: no answer); \param code the server's error code (may be empty);
  /// \param message the server's message, or the transport's.
  remote_error(const std::string& url, const std::string& method, long status, std::string code,
               const std::string& message);
  ~remote_error() override;
  /// The HTTP status, 0 if no answer came.
  /// \throws nothing
  [[nodiscard]] long status() const noexcept { return status_; }
  /// The server's error code (`NoSuchKey`, `AccessDenied`, `SlowDown`...), or empty.
  /// \throws nothing
  [[nodiscard]] const std::string& code() const noexcept { return code_; }

 private:
  long status_;
  std::string code_;
};

/// A sharded checkpoint's index names a shard written by another save (`save_sharded` records
/// its save's id in the index and every shard): the checkpoint was saved again, over the same
/// shard names, while it was read. The files are not damaged; loading again reads one save whole.
/// The message reads `ckpt: the shard '<shard>' is of save <id> (or: of a save without an id),
/// not of save <id> that its index '<index>' names: the sharded checkpoint was saved again while
/// it was read (load it again)`; `path()` is the index.
class mixed_save_error : public error {
 public:
  /// \param index the index; \param shard the shard; \param index_save the index's save id;
  /// \param shard_save the shard's ("" if it has none).
  mixed_save_error(const std::filesystem::path& index, const std::filesystem::path& shard, std::string index_save,
                   std::string shard_save);
  ~mixed_save_error() override;
  /// The shard of another save.
  /// \throws nothing
  [[nodiscard]] const std::filesystem::path& shard() const noexcept { return shard_; }
  /// The save id the index records.
  /// \throws nothing
  [[nodiscard]] const std::string& index_save() const noexcept { return index_save_; }
  /// The save id the shard records, "" if it records none.
  /// \throws nothing
  [[nodiscard]] const std::string& shard_save() const noexcept { return shard_save_; }

 private:
  std::filesystem::path shard_;
  std::string index_save_, shard_save_;
};

}  // namespace ckpt
