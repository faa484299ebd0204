//===- FileUtil.h - POSIX file access for the program driver ----*- C++ -*-===//
//
// A small RAII wrapper over a file descriptor whose reads fail on short
// reads, so a truncated file is an error rather than uninitialised data.
// Private to lamina_program.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_PROGRAM_FILEUTIL_H
#define LAMINA_LIB_RUNTIME_PROGRAM_FILEUTIL_H

#include "lamina/Runtime/Status.h"

#include <stdint.h>
#include <string>

namespace lamina::rt {

class File {
public:
  File() = default;
  File(const File &) = delete;
  File &operator=(const File &) = delete;
  ~File();

  /// Opens a regular file for reading; `size` receives its size.
  Status openForRead(const std::string &path, uint64_t &size);
  /// Creates or truncates `path` for writing.
  Status openForWrite(const std::string &path);
  /// Reads exactly `n` bytes at `offset`.
  Status readAt(void *buffer, uint64_t n, uint64_t offset);
  /// Writes all `n` bytes at the current position.
  Status write(const void *buffer, uint64_t n);
  /// Flushes the file's data and size to the disk (fsync).
  Status sync();
  /// Closes, reporting a failed final write (NFS, full disk).
  Status close();
  int fd() const { return fd_; }

private:
  int fd_ = -1;
  std::string path_;
};

/// Writes a file so that a crash or kill at any moment leaves either the
/// old file or the complete new one: the bytes go to a temporary file in the
/// same folder (".NAME.tmp-PID-N", so readers that skip dot files never see
/// it), which is fsynced and renamed over the target, then the folder is
/// fsynced so the rename itself survives a power loss. Destroying an
/// uncommitted writer removes the temporary file.
class AtomicWriter {
public:
  AtomicWriter() = default;
  AtomicWriter(const AtomicWriter &) = delete;
  AtomicWriter &operator=(const AtomicWriter &) = delete;
  ~AtomicWriter();

  Status open(const std::string &path);
  Status write(const void *buffer, uint64_t n) { return file.write(buffer, n); }
  Status commit();
  const std::string &tempPath() const { return temp; }

private:
  File file;
  std::string target, temp;
};

/// fsyncs the folder `dir`, making renames and unlinks in it durable.
Status syncDir(const std::string &dir);

/// The canonical absolute path of `path` (symlinks resolved), or "" if it
/// does not exist.
std::string realPath(const std::string &path);

/// The folder part of `path` ("." when it has none).
std::string parentDir(const std::string &path);

} // namespace lamina::rt

#endif // LAMINA_LIB_RUNTIME_PROGRAM_FILEUTIL_H
