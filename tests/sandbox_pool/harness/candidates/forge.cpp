// A candidate that forges the child's messages to the trusted parent (test_protocol.py): `forge(message)`
// writes `message` as a multiprocessing.Connection frame (4-byte big-endian length, then the bytes) to
// every stream socket of its process, the child's pipe to the parent among them. The static and symbol
// checks refuse this source; the test lets it through to try the protocol check behind them.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "../binding_registry.h"

static int forge(const std::string& message) {
  int sent = 0;
  for (int fd = 3; fd < 1024; ++fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    uint32_t n = htonl(static_cast<uint32_t>(message.size()));
    if (write(fd, &n, 4) == 4 && write(fd, message.data(), message.size()) == static_cast<ssize_t>(message.size()))
      ++sent;
  }
  return sent;
}

static void register_forge(pybind11::module& m) { m.def("forge", &forge); }

REGISTER_BINDING(forge, register_forge);
