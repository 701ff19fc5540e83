#include "gateway/api_key.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>

namespace gantry::internal {

bool BearerKeyMatches(std::string_view authorization, const std::string& key) {
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() <= kBearer.size() ||
      !std::equal(kBearer.begin(), kBearer.end(), authorization.begin(), [](char a, char b) {
        return a == std::tolower(static_cast<unsigned char>(b));
      })) {
    return false;
  }
  const std::string_view given = authorization.substr(kBearer.size());
  unsigned char a[SHA256_DIGEST_LENGTH];
  unsigned char b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(given.data()), given.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), b);
  return CRYPTO_memcmp(a, b, sizeof(a)) == 0;
}

grpc::Status CheckGrpcApiKey(const grpc::ServerContextBase& context, const std::string& key) {
  if (key.empty()) {
    return grpc::Status::OK;
  }
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "this gateway wants an API key: send the metadata 'authorization: Bearer <key>'"};
  }
  if (!BearerKeyMatches(std::string_view(it->second.data(), it->second.size()), key)) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "the API key in the 'authorization' metadata is not this gateway's"};
  }
  return grpc::Status::OK;
}

}  // namespace gantry::internal
