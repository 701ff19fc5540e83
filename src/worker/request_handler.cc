#include "worker/request_handler.h"

#include <cxxabi.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <typeinfo>

#include "core/doc_proto.h"
#include "core/registry.h"
#include "google/protobuf/util/json_util.h"

namespace gantry::internal {
namespace {

std::string Demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && demangled ? std::string(demangled.get()) : std::string(name);
}

// The name of the exception in flight, inside a catch block.
std::string CurrentExceptionTypeName() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  return type ? Demangle(type->name()) : "unknown exception";
}

void SetTimestamp(google::protobuf::Timestamp* ts) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  ts->set_seconds(nanos / 1000000000);
  ts->set_nanos(static_cast<std::int32_t>(nanos % 1000000000));
}

// docarray's LegacyDocument schema, which Jina's gateway expects for
// endpoints without typed schemas.
const char* kLegacyDocumentSchema = R"({
  "title": "LegacyDocument", "type": "object",
  "properties": {
    "id": {"title": "Id", "type": "string"},
    "tensor": {"title": "Tensor", "type": "array", "items": {"type": "number"}},
    "chunks": {"title": "Chunks", "type": "array", "items": {"type": "object"}},
    "matches": {"title": "Matches", "type": "array", "items": {"type": "object"}},
    "blob": {"title": "Blob", "type": "string", "format": "binary"},
    "text": {"title": "Text", "type": "string"},
    "url": {"title": "Url", "type": "string"},
    "embedding": {"title": "Embedding", "type": "array", "items": {"type": "number"}},
    "tags": {"title": "Tags", "type": "object"},
    "scores": {"title": "Scores", "type": "object"}
  }
})";

}  // namespace

StatusOr<std::unique_ptr<RequestHandler>> RequestHandler::Create(const std::string& jtype,
                                                                 const ExecutorContext& context,
                                                                 const std::string& runtime_name) {
  const ExecutorType* type = FindExecutorType(jtype);
  if (type == nullptr) {
    return UnknownExecutorError(jtype);
  }
  std::unique_ptr<RequestHandler> handler(new RequestHandler());
  handler->jtype_ = jtype;
  handler->executor_name_ = context.name;
  handler->runtime_name_ = runtime_name;
  handler->routes_ = type->routes();
  for (std::size_t i = 0; i < handler->routes_.size(); ++i) {
    for (const std::string& endpoint : handler->routes_[i].endpoints) {
      auto [it, inserted] = handler->endpoint_routes_.emplace(endpoint, i);
      if (!inserted) {
        return InvalidArgumentError(
            "executor '" + jtype + "': endpoint '" + endpoint + "' is bound to both " +
            handler->routes_[it->second].method_name + " and " + handler->routes_[i].method_name);
      }
    }
  }
  // One of the two places where user exceptions are caught (the other is
  // Handle): a throwing constructor is a failed start, with its message.
  try {
    handler->executor_ = type->create(context);
  } catch (const std::exception& e) {
    return FailedPreconditionError("executor '" + jtype + "' failed to initialise on " +
                                   context.device.ToString() + ": " + CurrentExceptionTypeName() +
                                   ": " + e.what());
  } catch (...) {
    return FailedPreconditionError("executor '" + jtype + "' failed to initialise on " +
                                   context.device.ToString() + ": " + CurrentExceptionTypeName());
  }
  return handler;
}

RequestHandler::~RequestHandler() { Close(); }

void RequestHandler::Close() {
  std::lock_guard lock(executor_mutex_);
  if (closed_ || !executor_) {
    return;
  }
  closed_ = true;
  try {
    executor_->Close();
  } catch (const std::exception& e) {
    spdlog::error("executor '{}' Close() threw {}: {}", jtype_, CurrentExceptionTypeName(),
                  e.what());
  }
}

void RequestHandler::SetError(jina::DataRequestProto* request, const std::string& exception_name,
                              const std::string& message) const {
  auto* status = request->mutable_header()->mutable_status();
  status->set_code(jina::StatusProto::ERROR);
  status->set_description(message);
  auto* exception = status->mutable_exception();
  exception->set_name(exception_name);
  exception->add_args(message);
  exception->set_executor(jtype_);
}

bool RequestHandler::Handle(jina::DataRequestProto* request) {
  auto* route_proto = request->add_routes();
  route_proto->set_executor(executor_name_);
  SetTimestamp(route_proto->mutable_start_time());

  const std::string& endpoint = request->header().exec_endpoint();
  if (endpoint == kDryRunEndpoint) {
    SetTimestamp(route_proto->mutable_end_time());
    return false;
  }
  auto it = endpoint_routes_.find(endpoint);
  if (it == endpoint_routes_.end()) {
    it = endpoint_routes_.find(kDefaultEndpoint);
  }
  std::string where =
      "executor '" + jtype_ + "' (" + runtime_name_ + ") endpoint '" + endpoint + "'";
  if (it == endpoint_routes_.end()) {
    std::string known;
    for (const auto& [name, index] : endpoint_routes_) {
      known += known.empty() ? "" : ", ";
      known += name;
    }
    std::string message = where +
                          ": no handler for this endpoint and no default handler; "
                          "endpoints: " +
                          (known.empty() ? "(none)" : known);
    SetError(request, "EndpointNotFound", message);
    SetTimestamp(route_proto->mutable_end_time());
    return true;
  }
  const Route& route = routes_[it->second];

  // Decode documents: Jina writers use `docs`, readers accept `docs_bytes`.
  auto* data = request->mutable_data();
  StatusOr<DocList> docs = DocList();
  if (data->has_docs_bytes()) {
    docs = DocListFromBytes(data->docs_bytes());
  } else if (data->has_docs()) {
    docs = TakeDocListFromProto(data->mutable_docs());
  }
  if (!docs.ok()) {
    SetError(request, "BadRequest", where + ": " + docs.status().message());
    SetTimestamp(route_proto->mutable_end_time());
    return true;
  }
  Parameters parameters(StructToDict(request->parameters()));
  // Jina: parameters[<executor name>] (a dict) is merged over the rest.
  if (const Value* own = parameters.Find(executor_name_); own != nullptr && own->AsDict()) {
    Value::Dict merged = *own->AsDict();
    for (auto& [key, value] : merged) {
      parameters.mutable_values().insert_or_assign(key, value);
    }
  }

  Status status;
  bool threw = false;
  std::string exception_name;
  {
    std::lock_guard lock(executor_mutex_);
    if (closed_) {
      status = UnavailableError("the executor is shutting down");
    } else {
      try {
        status = route.invoke(*executor_, *docs, parameters);
      } catch (const std::exception& e) {
        threw = true;
        exception_name = CurrentExceptionTypeName();
        status = UnknownError(e.what());
      } catch (...) {
        threw = true;
        exception_name = CurrentExceptionTypeName();
        status = UnknownError("non-standard exception");
      }
    }
  }
  SetTimestamp(route_proto->mutable_end_time());
  if (!status.ok()) {
    std::string message = where + ": " + (threw ? exception_name + ": " : "") +
                          (threw ? status.message() : status.ToString());
    spdlog::warn("{}", message);
    SetError(request, threw ? exception_name : std::string(StatusCodeName(status.code())), message);
    // The request's docs go back as they came in (Jina returns the request).
    data->clear_docs_bytes();
    data->mutable_docs()->Clear();
    DocListToProto(*docs, data->mutable_docs());
    return true;
  }
  data->clear_docs_bytes();
  data->mutable_docs()->Clear();
  DocListToProto(*docs, data->mutable_docs());
  return false;
}

void RequestHandler::FillEndpoints(jina::EndpointsProto* endpoints) const {
  auto* schemas = endpoints->mutable_schemas()->mutable_fields();
  // The schema is a constant of ours, so parsing it cannot fail.
  static const google::protobuf::Struct* const kLegacyModel = [] {
    auto* model = new google::protobuf::Struct();
    (void)google::protobuf::util::JsonStringToMessage(kLegacyDocumentSchema, model);
    return model;
  }();
  auto add = [&](const std::string& endpoint) {
    endpoints->add_endpoints(endpoint);
    google::protobuf::Value& entry = (*schemas)[endpoint];
    auto* fields = entry.mutable_struct_value()->mutable_fields();
    for (const char* side : {"input", "output"}) {
      auto* io = (*fields)[side].mutable_struct_value()->mutable_fields();
      (*io)["name"].set_string_value("LegacyDocument");
      *(*io)["model"].mutable_struct_value() = *kLegacyModel;
    }
    (*fields)["is_generator"].set_bool_value(false);
    (*fields)["is_singleton_doc"].set_bool_value(false);
    auto* params = (*fields)["parameters"].mutable_struct_value()->mutable_fields();
    (*params)["name"].set_null_value(google::protobuf::NULL_VALUE);
    (*params)["model"].set_null_value(google::protobuf::NULL_VALUE);
  };
  add(std::string(kDryRunEndpoint));
  for (const auto& [endpoint, index] : endpoint_routes_) {
    add(endpoint);
  }
}

}  // namespace gantry::internal
