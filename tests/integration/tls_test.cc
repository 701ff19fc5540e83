// TLS on a Deployment's gateway, end to end: certificates made by `openssl`
// in a temp dir, a real gateway and worker process, gRPC through
// gantry::Client and HTTP through cpp-httplib's SSLClient on 127.0.0.1.
#include <gantry/client.h>
#include <gantry/deployment.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "testutil/testutil.h"

namespace gantry {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr auto kCallTimeout = std::chrono::seconds(10);

DocList MakeDocs(int n) {
  DocList docs;
  for (int i = 0; i < n; ++i) {
    docs.emplace_back("doc " + std::to_string(i));
  }
  return docs;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    pki_ = testing::MakeTestPki(dir_, &error);
    ASSERT_TRUE(pki_.has_value()) << error;
  }

  // A deployment of EchoExec serving TLS on gRPC and HTTP; with
  // `require_client_cert`, only to clients with a certificate of the
  // client CA.
  void StartDeployment(bool require_client_cert) {
    dep_ = std::make_unique<Deployment>(DeploymentOptions{
        .uses = "EchoExec",
        .replicas = 1,
        .http_port = 0,
        .tls = {.cert_file = pki_->server_cert,
                .key_file = pki_->server_key,
                .client_ca_file = require_client_cert ? pki_->client_ca : std::string()}});
    ASSERT_TRUE(dep_->ok()) << dep_->status();
  }

  Client MakeClient(ClientTlsOptions tls) const {
    return Client(dep_->address(), ClientOptions{.tls = std::move(tls)});
  }

  static StatusOr<DocList> PostThree(Client& client) {
    return client.Post("/echo", MakeDocs(3), {.timeout = kCallTimeout});
  }

  // An HTTPS client of the gateway trusting `ca`, with a client
  // certificate when `cert` is given.
  std::unique_ptr<httplib::SSLClient> HttpsClient(const std::string& ca, const std::string& cert,
                                                  const std::string& key) const {
    auto client =
        cert.empty()
            ? std::make_unique<httplib::SSLClient>("127.0.0.1", dep_->http_port())
            : std::make_unique<httplib::SSLClient>("127.0.0.1", dep_->http_port(), cert, key);
    client->set_ca_cert_path(ca.c_str());
    client->enable_server_certificate_verification(true);
    client->set_connection_timeout(kCallTimeout);
    client->set_read_timeout(kCallTimeout);
    client->set_write_timeout(kCallTimeout);
    return client;
  }

  testing::TempDir dir_;
  std::optional<testing::TestPki> pki_;
  std::unique_ptr<Deployment> dep_;
};

TEST_F(TlsTest, ClientTrustingTheCaIsServedOverGrpc) {
  StartDeployment(/*require_client_cert=*/false);
  Client client = MakeClient({.enabled = true, .ca_file = pki_->ca});
  ASSERT_TRUE(client.Ping(kCallTimeout).ok());
  StatusOr<DocList> echoed = PostThree(client);
  ASSERT_TRUE(echoed.ok()) << echoed.status();
  ASSERT_EQ(echoed->size(), 3u);
  EXPECT_EQ((*echoed)[2].text(), "echo:doc 2");
  // Deployment::Post reaches its own gateway past TLS.
  StatusOr<DocList> own = dep_->Post("/echo", MakeDocs(2));
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ((*own)[1].text(), "echo:doc 1");
}

TEST_F(TlsTest, PlaintextClientAndClientTrustingAnotherCaAreRefused) {
  StartDeployment(/*require_client_cert=*/false);
  Client plaintext(dep_->address());
  StatusOr<DocList> plain = PostThree(plaintext);
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), StatusCode::kUnavailable) << plain.status();

  Client wrong_ca = MakeClient({.enabled = true, .ca_file = pki_->other_ca});
  StatusOr<DocList> refused = PostThree(wrong_ca);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status();
  EXPECT_FALSE(wrong_ca.Ping(kCallTimeout).ok());

  // The gateway keeps serving clients that trust its CA.
  Client good = MakeClient({.enabled = true, .ca_file = pki_->ca});
  EXPECT_TRUE(PostThree(good).ok());
}

TEST_F(TlsTest, MutualTlsRefusesClientsWithoutACertificateOfTheClientCa) {
  StartDeployment(/*require_client_cert=*/true);
  Client anonymous = MakeClient({.enabled = true, .ca_file = pki_->ca});
  StatusOr<DocList> refused = PostThree(anonymous);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status();

  // A certificate, but not one the client CA signed: the server's own.
  Client stranger = MakeClient({.enabled = true,
                                .ca_file = pki_->ca,
                                .cert_file = pki_->server_cert,
                                .key_file = pki_->server_key});
  EXPECT_FALSE(PostThree(stranger).ok());

  Client member = MakeClient({.enabled = true,
                              .ca_file = pki_->ca,
                              .cert_file = pki_->client_cert,
                              .key_file = pki_->client_key});
  StatusOr<DocList> echoed = PostThree(member);
  ASSERT_TRUE(echoed.ok()) << echoed.status();
  EXPECT_EQ((*echoed)[0].text(), "echo:doc 0");
}

TEST_F(TlsTest, HttpsServesClientsTrustingTheCaOnly) {
  StartDeployment(/*require_client_cert=*/false);
  auto client = HttpsClient(pki_->ca, "", "");
  auto res = client->Post("/echo", R"({"data": [{"text": "hi"}]})", "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_THAT(res->body, HasSubstr("echo:hi"));

  auto wrong_ca = HttpsClient(pki_->other_ca, "", "");
  auto refused = wrong_ca->Get("/status");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), httplib::Error::SSLServerVerification);

  // Plain HTTP to the HTTPS port gets no HTTP answer.
  httplib::Client plain("127.0.0.1", dep_->http_port());
  plain.set_connection_timeout(kCallTimeout);
  plain.set_read_timeout(kCallTimeout);
  auto plain_res = plain.Get("/status");
  EXPECT_FALSE(plain_res && plain_res->status == 200);
}

// A certificate renewed in place (here by one another CA signed, so that
// clients tell which they got): after ReloadTls, new connections get it
// over gRPC and HTTPS; a file that does not load is an error naming it, and
// the certificate in use stays.
TEST_F(TlsTest, ReloadTlsServesARenewedCertificateToNewConnections) {
  StartDeployment(/*require_client_cert=*/false);
  Client before = MakeClient({.enabled = true, .ca_file = pki_->ca});
  ASSERT_TRUE(PostThree(before).ok());

  std::filesystem::copy_file(pki_->renewed_server_cert, pki_->server_cert,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(pki_->renewed_server_key, pki_->server_key,
                             std::filesystem::copy_options::overwrite_existing);
  ASSERT_TRUE(dep_->ReloadTls().ok());
  // gRPC's file watcher picks the new files up within a second or two.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  StatusOr<DocList> renewed = UnavailableError("not tried");
  while (std::chrono::steady_clock::now() < deadline) {
    Client client = MakeClient({.enabled = true, .ca_file = pki_->other_ca});
    renewed = PostThree(client);
    if (renewed.ok()) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(renewed.ok()) << "no new connection got the renewed certificate: "
                            << renewed.status();
  Client old_ca = MakeClient({.enabled = true, .ca_file = pki_->ca});
  EXPECT_FALSE(PostThree(old_ca).ok()) << "a new connection still got the old certificate";
  // HTTPS takes it at once.
  auto https = HttpsClient(pki_->other_ca, "", "");
  auto res = https->Post("/echo", R"({"data": [{"text": "hi"}]})", "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << res->body;
  auto https_old = HttpsClient(pki_->ca, "", "");
  EXPECT_FALSE(https_old->Get("/status"));

  // A broken key: refused by name, the renewed certificate stays in use.
  testing::WriteFile(pki_->server_key, "not a key\n");
  const Status broken = dep_->ReloadTls();
  EXPECT_EQ(broken.code(), StatusCode::kInvalidArgument) << broken;
  EXPECT_THAT(broken.message(), HasSubstr(pki_->server_key));
  std::this_thread::sleep_for(std::chrono::seconds(2));  // past a watcher refresh
  Client still = MakeClient({.enabled = true, .ca_file = pki_->other_ca});
  StatusOr<DocList> served = PostThree(still);
  EXPECT_TRUE(served.ok()) << served.status();
  auto https_still = HttpsClient(pki_->other_ca, "", "");
  auto still_res = https_still->Get("/status");
  ASSERT_TRUE(still_res) << httplib::to_string(still_res.error());
  EXPECT_EQ(still_res->status, 200);
}

TEST_F(TlsTest, ReloadTlsWithoutTlsIsAFailedPrecondition) {
  Deployment plain({.uses = "EchoExec"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  const Status status = plain.ReloadTls();
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("serves no TLS"));
}

TEST_F(TlsTest, HttpsWithMutualTlsNeedsAClientCertificate) {
  StartDeployment(/*require_client_cert=*/true);
  auto anonymous = HttpsClient(pki_->ca, "", "");
  auto refused = anonymous->Get("/status");
  EXPECT_FALSE(refused && refused->status == 200);

  auto member = HttpsClient(pki_->ca, pki_->client_cert, pki_->client_key);
  auto res = member->Post("/echo", R"({"data": [{"text": "hi"}]})", "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_THAT(res->body, HasSubstr("echo:hi"));
}

TEST_F(TlsTest, BadServerFilesFailTheStartNamingFileAndKey) {
  const std::string missing = dir_.File("no-such.pem");
  Deployment no_cert(
      {.uses = "EchoExec", .tls = {.cert_file = missing, .key_file = pki_->server_key}});
  ASSERT_FALSE(no_cert.ok());
  EXPECT_THAT(no_cert.status().message(),
              AllOf(HasSubstr("ssl_certfile"), HasSubstr(missing), HasSubstr("cannot open")));

  // A certificate where the key should be.
  Deployment cert_as_key(
      {.uses = "EchoExec", .tls = {.cert_file = pki_->server_cert, .key_file = pki_->server_cert}});
  ASSERT_FALSE(cert_as_key.ok());
  EXPECT_THAT(cert_as_key.status().message(),
              AllOf(HasSubstr("ssl_keyfile"), HasSubstr(pki_->server_cert),
                    HasSubstr("no unencrypted PEM private key")));

  // Another certificate's key.
  Deployment mismatch(
      {.uses = "EchoExec", .tls = {.cert_file = pki_->server_cert, .key_file = pki_->client_key}});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_THAT(mismatch.status().message(),
              AllOf(HasSubstr("ssl_keyfile"), HasSubstr(pki_->client_key),
                    HasSubstr("does not match the certificate")));

  Deployment key_only({.uses = "EchoExec", .tls = {.key_file = pki_->server_key}});
  ASSERT_FALSE(key_only.ok());
  EXPECT_THAT(key_only.status().message(), HasSubstr("ssl_certfile"));

  Deployment bad_client_ca({.uses = "EchoExec",
                            .tls = {.cert_file = pki_->server_cert,
                                    .key_file = pki_->server_key,
                                    .client_ca_file = pki_->server_key}});
  ASSERT_FALSE(bad_client_ca.ok());
  EXPECT_THAT(bad_client_ca.status().message(),
              AllOf(HasSubstr("ssl_client_cafile"), HasSubstr(pki_->server_key)));
}

TEST_F(TlsTest, BadClientFilesFailEveryCallNamingTheFile) {
  StartDeployment(/*require_client_cert=*/false);
  const std::string missing = dir_.File("no-such-ca.pem");
  Client client = MakeClient({.enabled = true, .ca_file = missing});
  StatusOr<DocList> result = PostThree(client);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), AllOf(HasSubstr(missing), HasSubstr("cannot open")));
  Status ping = client.Ping(kCallTimeout);
  EXPECT_THAT(ping.message(), HasSubstr(missing));

  Client half = MakeClient({.enabled = true, .ca_file = pki_->ca, .cert_file = pki_->client_cert});
  StatusOr<DocList> half_result = PostThree(half);
  ASSERT_FALSE(half_result.ok());
  EXPECT_THAT(half_result.status().message(),
              HasSubstr("both the certificate and its private key"));
}

}  // namespace
}  // namespace gantry
