// The key the TCP transport's ranks prove themselves with in the handshake (tcp_handshake.h):
// derived from the store's token when there is one (the option, else C10D_STORE_TOKEN), else
// from a random job secret that the first rank to get there puts in the store.
#include "backends/gloo_like/tcp_handshake.h"

#include "core/auth.h"
#include "core/check.h"

namespace c10d::inline v1::gloo_like {

TransportKey transport_key(Store& store, const std::string& token, int rank) {
  if (!token.empty()) return derive_transport_key(token);
  if (auto env = core::token_from_env()) return derive_transport_key(*env);
  // The first rank to get here, of any group on this store, picks the secret.
  const std::string mine = core::random_hex(32);
  const Bytes got = store.compare_set(kTransportSecretKey, {}, core::as_bytes(mine));
  if (got.size() < 32) {
    C10D_THROW(NetworkError,
               "rank {}: the job secret in the store ('{}') has {} bytes, fewer than 32; delete "
               "the key, or set C10D_STORE_TOKEN",
               rank, kTransportSecretKey, got.size());
  }
  return derive_transport_key({reinterpret_cast<const char*>(got.data()), got.size()});
}

}  // namespace c10d::inline v1::gloo_like
