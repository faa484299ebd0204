//===- FileUtil.cpp - POSIX file access for the program driver ------------===//

#include "FileUtil.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace lamina::rt;

static Status ioError(const char *what, const std::string &path) {
  return Status::error(std::string("cannot ") + what + " '" + path +
                       "': " + std::strerror(errno));
}

File::~File() {
  if (fd_ >= 0)
    ::close(fd_);
}

Status File::openForRead(const std::string &path, uint64_t &size) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0)
    return ioError("open", path);
  struct stat st;
  if (::fstat(fd_, &st) != 0)
    return ioError("stat", path);
  if (!S_ISREG(st.st_mode))
    return Status::error("'" + path + "' is not a regular file");
  size = uint64_t(st.st_size);
  return Status::success();
}

Status File::openForWrite(const std::string &path) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    return ioError("create", path);
  return Status::success();
}

Status File::readAt(void *buffer, uint64_t n, uint64_t offset) {
  auto *p = static_cast<char *>(buffer);
  while (n > 0) {
    // pread caps one call at about 2 GiB on Linux; loop for larger tensors.
    size_t chunk = n > (uint64_t(1) << 30) ? size_t(1) << 30 : size_t(n);
    ssize_t got = ::pread(fd_, p, chunk, off_t(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return ioError("read", path_);
    if (got == 0)
      return Status::error("'" + path_ + "' ends early (truncated file?)");
    p += got;
    n -= uint64_t(got);
    offset += uint64_t(got);
  }
  return Status::success();
}

Status File::write(const void *buffer, uint64_t n) {
  auto *p = static_cast<const char *>(buffer);
  while (n > 0) {
    size_t chunk = n > (uint64_t(1) << 30) ? size_t(1) << 30 : size_t(n);
    ssize_t put = ::write(fd_, p, chunk);
    if (put < 0 && errno == EINTR)
      continue;
    if (put < 0)
      return ioError("write", path_);
    p += put;
    n -= uint64_t(put);
  }
  return Status::success();
}

Status File::sync() {
  if (::fsync(fd_) != 0)
    return ioError("sync", path_);
  return Status::success();
}

Status File::close() {
  int fd = fd_;
  fd_ = -1;
  if (fd >= 0 && ::close(fd) != 0)
    return ioError("write", path_);
  return Status::success();
}

std::string lamina::rt::realPath(const std::string &path) {
  char *real = ::realpath(path.c_str(), nullptr);
  if (!real)
    return "";
  std::string s(real);
  std::free(real);
  return s;
}

std::string lamina::rt::parentDir(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

AtomicWriter::~AtomicWriter() {
  if (!temp.empty()) {
    (void)file.close();
    ::unlink(temp.c_str());
  }
}

Status AtomicWriter::open(const std::string &path) {
  static unsigned counter = 0;
  target = path;
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string name = dir + "." + base + ".tmp-" + std::to_string(::getpid()) +
                     "-" + std::to_string(counter++);
  if (Status s = file.openForWrite(name); !s.ok())
    return s;
  temp = name;
  return Status::success();
}

Status AtomicWriter::commit() {
  if (temp.empty())
    return Status::error("'" + target + "' was not opened for writing");
  if (Status s = file.sync(); !s.ok())
    return s;
  if (Status s = file.close(); !s.ok())
    return s;
  if (::rename(temp.c_str(), target.c_str()) != 0)
    return ioError("rename a temporary file to", target);
  temp.clear();
  return syncDir(parentDir(target));
}

Status lamina::rt::syncDir(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return ioError("open the folder", dir);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0)
    return ioError("sync the folder", dir);
  return Status::success();
}
