#include "raw_shared_page.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <weft/error.hpp>

namespace weft::bench {

RawSharedBuffer::RawSharedBuffer(Bootstrap& boot, int peer, uint64_t bytes, int tag) {
  const bool creator = boot.rank() < peer;
  mapped_ = bytes + 4096;
  char name[64] = {};
  if (creator) {
    std::snprintf(name, sizeof(name), "/weft-bench-%d-%d", static_cast<int>(getpid()), tag);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throwSystemError(std::string("shm_open ") + name, errno);
    if (ftruncate(fd, static_cast<off_t>(mapped_)) != 0) {
      int err = errno;
      close(fd);
      shm_unlink(name);
      throwSystemError("ftruncate of the raw shared buffer", err);
    }
    base_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    boot.send(name, sizeof(name), peer, tag);
    boot.recv(name, sizeof(name), peer, tag);  // the peer has it open: the name can go
    shm_unlink(name);
  } else {
    boot.recv(name, sizeof(name), peer, tag);
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) throwSystemError(std::string("shm_open ") + name, errno);
    base_ = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    boot.send(name, sizeof(name), peer, tag);
  }
  if (base_ == MAP_FAILED) throwSystemError("mmap of the raw shared buffer", errno);
  flags_ = static_cast<uint64_t*>(base_);
  data_ = static_cast<uint8_t*>(base_) + 4096;
}

RawSharedBuffer::~RawSharedBuffer() {
  if (base_ != nullptr && base_ != MAP_FAILED) munmap(base_, mapped_);
}

}  // namespace weft::bench
