// A candidate that forges the child's messages to the trusted parent (test_protocol.py): `forge(message)`
// writes `message` as a multiprocessing.Connection frame (4-byte big-endian length, then the bytes) to
// every stream socket of its process, the child's pipe to the parent among them; `stamp(text)` sends
// `text` on every SOCK_SEQPACKET socket (the outside clock's, clock.py) and `close_clock()` closes them;
// `forge_when_freed(out, message, nth)` returns `out` as a tensor whose memory, when the harness frees the
// nth of them, forges `message` (candidate code running after the step its harness reports).
// The symbol check refuses this source (raw writes, socket options, closing descriptors); the tests let
// it through to try the checks behind it.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "../binding_registry.h"

static int for_each_socket(int wanted, bool (*act)(int fd, const std::string& text), const std::string& text) {
  int done = 0;
  for (int fd = 3; fd < 1024; ++fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == wanted && act(fd, text)) ++done;
  }
  return done;
}

static bool send_text(int fd, const std::string& text) {
  return write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

static bool send_frame(int fd, const std::string& message) {
  uint32_t n = htonl(static_cast<uint32_t>(message.size()));
  return write(fd, &n, 4) == 4 && send_text(fd, message);
}

static int forge(const std::string& message) { return for_each_socket(SOCK_STREAM, send_frame, message); }

static bool close_fd(int fd, const std::string&) { return close(fd) == 0; }

static int stamp(const std::string& text) { return for_each_socket(SOCK_SEQPACKET, send_text, text); }

static int close_clock() { return for_each_socket(SOCK_SEQPACKET, close_fd, ""); }

// The forging deleter sits in a storage of the allocator's kind (resizable): the child's check that outputs are
// torch's own memory (child/main.py `check_fresh`, 2026-12-04) lets it through to the protocol check behind it.
struct Pending {
  torch::Tensor keep;
  std::string message;
  int64_t nth;
};

static void forge_on_free(void* context) {
  static int64_t freed = 0;
  auto* pending = static_cast<Pending*>(context);
  if (++freed == pending->nth) forge(pending->message);
  delete pending;
}

static torch::Tensor forge_when_freed(torch::Tensor out, const std::string& message, int64_t nth) {
  auto* pending = new Pending{out, message, nth};
  c10::Storage storage(c10::Storage::use_byte_size_t(), out.nbytes(),
                       c10::DataPtr(out.data_ptr(), pending, &forge_on_free, out.device()),
                       c10::GetAllocator(out.device().type()), /*resizable=*/true);
  return torch::empty({0}, out.options()).set_(storage, 0, out.sizes(), out.strides());
}

static void register_forge(pybind11::module& m) {
  m.def("forge", &forge);
  m.def("forge_when_freed", &forge_when_freed);
  m.def("stamp", &stamp);
  m.def("close_clock", &close_clock);
}

REGISTER_BINDING(forge, register_forge);
