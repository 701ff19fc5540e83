#include "common/tls.h"

#include <fcntl.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>

#include "core/deployment_rules.h"

namespace gantry::internal {
namespace {

// Far above any real certificate chain; keeps a wrong path (a log, a
// device) from being read whole.
constexpr std::size_t kMaxPemBytes = std::size_t{1} << 20;

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Deleter {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyDeleter>;

// "TLS certificate (ssl_certfile) 'server.pem'": how messages name a file.
std::string Name(std::string_view what, const std::string& path) {
  return std::string(what) + " '" + path + "'";
}

StatusOr<std::string> ReadPem(std::string_view what, const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return InvalidArgumentError(Name(what, path) + ": cannot open: " + std::strerror(errno));
  }
  std::string text;
  char buffer[8192];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    text.append(buffer, n);
    if (text.size() > kMaxPemBytes) {
      std::fclose(file);
      return InvalidArgumentError(Name(what, path) + ": larger than " +
                                  std::to_string(kMaxPemBytes) + " bytes; not a PEM file");
    }
  }
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) {
    return InvalidArgumentError(Name(what, path) + ": cannot read");
  }
  if (text.empty()) {
    return InvalidArgumentError(Name(what, path) + ": the file is empty");
  }
  return text;
}

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Never prompts on a terminal for an encrypted key's passphrase.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*userdata*/) { return 0; }

// The first certificate of a PEM text (the leaf of a chain); null if none.
X509Ptr FirstCertificate(const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  return X509Ptr(bio ? PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr) : nullptr);
}

}  // namespace

StatusOr<ServerTlsFiles> LoadServerTls(const ServerTlsOptions& options) {
  constexpr std::string_view kCert = "TLS certificate (ssl_certfile)";
  constexpr std::string_view kKey = "TLS private key (ssl_keyfile)";
  constexpr std::string_view kClientCa = "TLS client CA (ssl_client_cafile)";
  GANTRY_RETURN_IF_ERROR(CheckServerTlsOptions(options));
  ServerTlsFiles files;
  GANTRY_ASSIGN_OR_RETURN(files.cert_chain, ReadPem(kCert, options.cert_file));
  GANTRY_ASSIGN_OR_RETURN(files.private_key, ReadPem(kKey, options.key_file));
  X509Ptr cert = FirstCertificate(files.cert_chain);
  if (!cert) {
    ERR_clear_error();
    return InvalidArgumentError(Name(kCert, options.cert_file) +
                                ": no PEM certificate in it (\"-----BEGIN CERTIFICATE-----\")");
  }
  BioPtr key_bio = MemoryBio(files.private_key);
  KeyPtr key(key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr)
                     : nullptr);
  if (!key) {
    ERR_clear_error();
    return InvalidArgumentError(Name(kKey, options.key_file) +
                                ": no unencrypted PEM private key in it");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgumentError(Name(kKey, options.key_file) +
                                ": does not match the certificate in " +
                                Name(kCert, options.cert_file));
  }
  if (!options.client_ca_file.empty()) {
    GANTRY_ASSIGN_OR_RETURN(files.client_ca, ReadPem(kClientCa, options.client_ca_file));
    if (!FirstCertificate(files.client_ca)) {
      ERR_clear_error();
      return InvalidArgumentError(Name(kClientCa, options.client_ca_file) +
                                  ": no PEM certificate in it");
    }
  }
  return files;
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options) {
  if (!options.enabled()) {
    return grpc::InsecureServerCredentials();
  }
  GANTRY_ASSIGN_OR_RETURN(ServerTlsFiles files, LoadServerTls(options));
  grpc::SslServerCredentialsOptions ssl(
      files.client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = files.client_ca;
  ssl.pem_key_cert_pairs.push_back({files.private_key, files.cert_chain});
  return grpc::SslServerCredentials(ssl);
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& options) {
  if (!options.enabled) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  if (!options.ca_file.empty()) {
    GANTRY_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem("TLS CA file", options.ca_file));
    if (!FirstCertificate(ssl.pem_root_certs)) {
      ERR_clear_error();
      return InvalidArgumentError(Name("TLS CA file", options.ca_file) +
                                  ": no PEM certificate in it");
    }
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return InvalidArgumentError(
        "a TLS client certificate needs both the certificate and its private key");
  }
  if (!options.cert_file.empty()) {
    ServerTlsOptions pair{.cert_file = options.cert_file, .key_file = options.key_file};
    GANTRY_ASSIGN_OR_RETURN(ServerTlsFiles files, LoadServerTls(pair));
    ssl.pem_cert_chain = std::move(files.cert_chain);
    ssl.pem_private_key = std::move(files.private_key);
  }
  return grpc::SslCredentials(ssl);
}

namespace {

// Writes `text` to `path`, readable by this user only (it may be a key).
Status WritePrivateFile(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return InternalError("cannot write '" + path + "': " + std::strerror(errno));
  }
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      return InternalError("cannot write '" + path + "': " + std::strerror(error));
    }
    written += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<ReloadableServerCredentials>> ReloadableServerCredentials::Create(
    ServerTlsOptions options) {
  GANTRY_ASSIGN_OR_RETURN(ServerTlsFiles files, LoadServerTls(options));
  std::error_code ec;
  std::string pattern = (std::filesystem::temp_directory_path(ec) / "gantry-tls-XXXXXX").string();
  if (ec || ::mkdtemp(pattern.data()) == nullptr) {
    return InternalError("cannot make a folder for the gateway's TLS files under " + pattern +
                         ": " + (ec ? ec.message() : std::strerror(errno)));
  }
  std::unique_ptr<ReloadableServerCredentials> self(
      new ReloadableServerCredentials(std::move(options), pattern));
  {
    std::lock_guard lock(self->mutex_);
    GANTRY_RETURN_IF_ERROR(self->Install(files));
  }
  const std::string current = self->dir_ + "/current/";
  const bool mutual = !files.client_ca.empty();
  // The watcher reads the files once here, then every kRefreshSeconds.
  self->provider_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      current + "key.pem", current + "cert.pem", mutual ? current + "ca.pem" : std::string(),
      kRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions tls(self->provider_);
  tls.watch_identity_key_cert_pairs();
  if (mutual) {
    tls.watch_root_certs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  self->credentials_ = grpc::experimental::TlsServerCredentials(tls);
  if (!self->credentials_) {
    return InternalError("gRPC refused the TLS server credentials");
  }
  return self;
}

ReloadableServerCredentials::~ReloadableServerCredentials() {
  credentials_.reset();
  provider_.reset();  // stops the watcher before its files go
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

Status ReloadableServerCredentials::Reload() {
  GANTRY_ASSIGN_OR_RETURN(ServerTlsFiles files, LoadServerTls(options_));
  if (files.client_ca.empty() != options_.client_ca_file.empty()) {
    return InternalError("the client CA cannot be added or removed by a reload");
  }
  std::lock_guard lock(mutex_);
  return Install(files);
}

Status ReloadableServerCredentials::Install(const ServerTlsFiles& files) {
  const int next = generation_ + 1;
  const std::string folder = dir_ + "/gen-" + std::to_string(next);
  if (::mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) {
    return InternalError("cannot make '" + folder + "': " + std::strerror(errno));
  }
  GANTRY_RETURN_IF_ERROR(WritePrivateFile(folder + "/key.pem", files.private_key));
  GANTRY_RETURN_IF_ERROR(WritePrivateFile(folder + "/cert.pem", files.cert_chain));
  if (!files.client_ca.empty()) {
    GANTRY_RETURN_IF_ERROR(WritePrivateFile(folder + "/ca.pem", files.client_ca));
  }
  // One rename moves key, certificate and CA together; the watcher reads
  // them by path through `current`.
  const std::string link = dir_ + "/current.new";
  ::unlink(link.c_str());
  if (::symlink(("gen-" + std::to_string(next)).c_str(), link.c_str()) != 0 ||
      ::rename(link.c_str(), (dir_ + "/current").c_str()) != 0) {
    return InternalError("cannot switch '" + dir_ +
                         "/current' to the new TLS files: " + std::strerror(errno));
  }
  // The generation before the last may still be mid-read by the watcher
  // only if a reload came within one refresh; the one before that cannot.
  std::error_code ignored;
  std::filesystem::remove_all(dir_ + "/gen-" + std::to_string(next - 2), ignored);
  generation_ = next;
  return OkStatus();
}

}  // namespace gantry::internal
