// libFuzzer target: the HTTP gateway's JSON documents parser
// (src/gateway/json_docs.cc): a POST body as ParseHttpDataRequest reads it,
// with a 1 MiB cap; the first byte picks POST /post (the body names the
// endpoint) or POST /encode. Whatever the body, the answer is a Status: no
// exception escapes (cpp-httplib would turn one into a 500). A request
// that parsed is turned back into JSON, as the reply path does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gateway/json_docs.h"
#include "jina/jina.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const std::string endpoint = (data[0] & 1) != 0 ? "" : "/encode";
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  jina::DataRequestProto request;
  bool single = false;
  gantry::Status status = gantry::internal::ParseHttpDataRequest(
      body, endpoint, std::uint64_t{1} << 20, &request, &single);
  if (!status.ok()) {
    if (status.message().empty()) {
      __builtin_trap();  // every refusal says why
    }
    return 0;
  }
  for (const auto& doc : request.data().docs().docs()) {
    (void)gantry::internal::DocProtoToJson(doc).dump(-1, ' ', false,
                                                     nlohmann::json::error_handler_t::replace);
  }
  (void)gantry::internal::StructToJson(request.parameters());
  return 0;
}
