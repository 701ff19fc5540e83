#include "gateway/openapi.h"

#include <map>

namespace gantry::internal {
namespace {

using nlohmann::json;

// The bodies, as each route's parser accepts them and its reply writer
// writes them (gateway/json_docs.h, openai_embeddings.h, tei_embeddings.h,
// kserve_http.h). Open objects where the executor decides the fields.
constexpr const char* kSchemas = R"json({
  "JinaDocument": {
    "type": "object",
    "description": "A docarray document: `id`, `text`, `embedding`, `tensor`, `tags`, `uri`, nested `chunks` and `matches`, or any field an executor's schema has. An array of numbers is a float32 tensor unless given as {\"dtype\", \"shape\", \"data\"}.",
    "properties": {
      "id": {"type": "string"},
      "text": {"type": "string"},
      "embedding": {"type": "array"},
      "tensor": {"type": "array"},
      "tags": {"type": "object"},
      "uri": {"type": "string"}
    },
    "additionalProperties": true
  },
  "JinaDocuments": {
    "description": "A list of documents, or one (then the reply's data is one too).",
    "oneOf": [
      {"type": "array", "items": {"$ref": "#/components/schemas/JinaDocument"}},
      {"$ref": "#/components/schemas/JinaDocument"}
    ]
  },
  "JinaHeader": {
    "type": "object",
    "properties": {
      "requestId": {"type": "string"},
      "targetExecutor": {"type": "string"}
    },
    "additionalProperties": true
  },
  "JinaDataRequest": {
    "type": "object",
    "properties": {
      "data": {"$ref": "#/components/schemas/JinaDocuments"},
      "parameters": {"type": "object"},
      "header": {"$ref": "#/components/schemas/JinaHeader"}
    },
    "example": {"data": [{"text": "hello world"}], "parameters": {}}
  },
  "JinaPostRequest": {
    "type": "object",
    "required": ["execEndpoint"],
    "properties": {
      "execEndpoint": {"type": "string", "description": "The executor endpoint, e.g. /encode."},
      "data": {"$ref": "#/components/schemas/JinaDocuments"},
      "parameters": {"type": "object"},
      "header": {"$ref": "#/components/schemas/JinaHeader"}
    },
    "example": {"execEndpoint": "/encode", "data": [{"text": "hello world"}]}
  },
  "JinaDataReply": {
    "type": "object",
    "required": ["data", "header"],
    "properties": {
      "data": {"$ref": "#/components/schemas/JinaDocuments"},
      "parameters": {"type": "object"},
      "header": {"type": "object"}
    }
  },
  "JinaError": {
    "type": "object",
    "required": ["detail"],
    "properties": {
      "detail": {"type": "string"},
      "header": {"type": "object"}
    }
  },
  "JinaStatus": {
    "type": "object",
    "properties": {
      "jina": {"type": "object", "additionalProperties": {"type": "string"}},
      "envs": {"type": "object"}
    }
  },
  "Empty": {"type": "object", "maxProperties": 0},
  "DryRunStatus": {
    "type": "object",
    "required": ["code"],
    "properties": {
      "code": {"type": "integer", "description": "0 when a replica answered."},
      "description": {"type": "string"},
      "exception": {"type": "object"}
    }
  },
  "OpenAiEmbeddingsRequest": {
    "type": "object",
    "required": ["input", "model"],
    "properties": {
      "input": {
        "oneOf": [
          {"type": "string", "minLength": 1},
          {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"type": "string", "minLength": 1}}
        ]
      },
      "model": {"type": "string", "minLength": 1, "description": "A name in GET /v1/models."},
      "encoding_format": {"type": "string", "enum": ["float", "base64"], "default": "float"},
      "dimensions": {"type": "integer", "minimum": 1},
      "user": {"type": "string"}
    },
    "example": {"model": "executor", "input": ["hello world"]}
  },
  "OpenAiEmbedding": {
    "type": "object",
    "required": ["object", "index", "embedding"],
    "properties": {
      "object": {"const": "embedding"},
      "index": {"type": "integer", "minimum": 0},
      "embedding": {
        "oneOf": [
          {"type": "array", "items": {"type": "number"}},
          {"type": "string", "description": "base64 of little-endian float32"}
        ]
      }
    }
  },
  "OpenAiEmbeddingsReply": {
    "type": "object",
    "required": ["object", "data", "model", "usage"],
    "properties": {
      "object": {"const": "list"},
      "data": {"type": "array", "items": {"$ref": "#/components/schemas/OpenAiEmbedding"}},
      "model": {"type": "string"},
      "usage": {
        "type": "object",
        "required": ["prompt_tokens", "total_tokens"],
        "properties": {
          "prompt_tokens": {"type": "integer", "minimum": 0},
          "total_tokens": {"type": "integer", "minimum": 0}
        }
      }
    }
  },
  "OpenAiModelList": {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
      "object": {"const": "list"},
      "data": {
        "type": "array",
        "items": {
          "type": "object",
          "required": ["id", "object", "created", "owned_by"],
          "properties": {
            "id": {"type": "string"},
            "object": {"const": "model"},
            "created": {"type": "integer"},
            "owned_by": {"type": "string"}
          }
        }
      }
    }
  },
  "OpenAiError": {
    "type": "object",
    "required": ["error"],
    "properties": {
      "error": {
        "type": "object",
        "required": ["message", "type"],
        "properties": {
          "message": {"type": "string"},
          "type": {"type": "string"},
          "param": {"type": ["string", "null"]},
          "code": {"type": ["string", "null"]}
        }
      }
    }
  },
  "TeiInputs": {
    "oneOf": [
      {"type": "string"},
      {"type": "array", "minItems": 1, "items": {"type": "string"}}
    ]
  },
  "TeiTruncationDirection": {"type": "string", "enum": ["Left", "Right", "left", "right"], "default": "Right"},
  "TeiEmbedRequest": {
    "type": "object",
    "required": ["inputs"],
    "properties": {
      "inputs": {"$ref": "#/components/schemas/TeiInputs"},
      "normalize": {"type": "boolean", "default": true},
      "truncate": {"type": ["boolean", "null"], "description": "Cut inputs over the model's limit; the server's auto_truncate when absent."},
      "truncation_direction": {"$ref": "#/components/schemas/TeiTruncationDirection"},
      "prompt_name": {"type": ["string", "null"]}
    },
    "example": {"inputs": ["hello world"]}
  },
  "TeiEmbedReply": {
    "type": "array",
    "items": {"type": "array", "items": {"type": "number"}}
  },
  "TeiSimilarityRequest": {
    "type": "object",
    "required": ["inputs"],
    "properties": {
      "inputs": {
        "type": "object",
        "required": ["source_sentence", "sentences"],
        "properties": {
          "source_sentence": {"type": "string", "minLength": 1},
          "sentences": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
        }
      },
      "parameters": {
        "type": ["object", "null"],
        "properties": {
          "truncate": {"type": ["boolean", "null"]},
          "truncation_direction": {"$ref": "#/components/schemas/TeiTruncationDirection"},
          "prompt_name": {"type": ["string", "null"]}
        }
      }
    },
    "example": {"inputs": {"source_sentence": "What is Deep Learning?", "sentences": ["What is Machine Learning?", "cheese"]}}
  },
  "TeiSimilarityReply": {
    "type": "array",
    "items": {"type": "number"}
  },
  "TeiRerankRequest": {
    "type": "object",
    "required": ["query", "texts"],
    "properties": {
      "query": {"type": "string"},
      "texts": {"type": "array", "minItems": 1, "items": {"type": "string"}},
      "raw_scores": {"type": "boolean", "default": false},
      "return_text": {"type": "boolean", "default": false},
      "truncate": {"type": ["boolean", "null"]},
      "truncation_direction": {"$ref": "#/components/schemas/TeiTruncationDirection"}
    },
    "example": {"query": "what is deep learning?", "texts": ["Deep learning is ...", "cheese"]}
  },
  "TeiRerankReply": {
    "type": "array",
    "items": {
      "type": "object",
      "required": ["index", "score"],
      "properties": {
        "index": {"type": "integer", "minimum": 0},
        "score": {"type": "number"},
        "text": {"type": "string"}
      }
    }
  },
  "TeiTokenizeRequest": {
    "type": "object",
    "required": ["inputs"],
    "properties": {
      "inputs": {"$ref": "#/components/schemas/TeiInputs"},
      "add_special_tokens": {"type": "boolean", "default": true},
      "prompt_name": {"type": ["string", "null"]}
    },
    "example": {"inputs": "hello world"}
  },
  "TeiTokenizeReply": {
    "type": "array",
    "items": {
      "type": "array",
      "items": {
        "type": "object",
        "required": ["id", "text", "special", "start", "stop"],
        "properties": {
          "id": {"type": "integer", "minimum": 0},
          "text": {"type": "string"},
          "special": {"type": "boolean"},
          "start": {"type": ["integer", "null"], "description": "UTF-8 byte offset"},
          "stop": {"type": ["integer", "null"]}
        }
      }
    }
  },
  "TeiInfo": {
    "type": "object",
    "required": ["model_id", "version"],
    "properties": {
      "model_id": {"type": "string"},
      "model_sha": {"type": ["string", "null"]},
      "model_dtype": {"type": "string"},
      "model_type": {"type": "object"},
      "max_concurrent_requests": {"type": "integer"},
      "max_input_length": {"type": "integer"},
      "max_batch_tokens": {"type": "integer"},
      "max_client_batch_size": {"type": "integer"},
      "auto_truncate": {"type": "boolean"},
      "tokenization_workers": {"type": "integer"},
      "version": {"type": "string"}
    },
    "additionalProperties": true
  },
  "TeiError": {
    "type": "object",
    "required": ["error", "error_type"],
    "properties": {
      "error": {"type": "string"},
      "error_type": {"type": "string", "enum": ["Validation", "Tokenizer", "Backend", "Overloaded", "Unhealthy"]}
    }
  },
  "KServeServerMetadata": {
    "type": "object",
    "required": ["name", "version", "extensions"],
    "properties": {
      "name": {"type": "string"},
      "version": {"type": "string"},
      "extensions": {"type": "array", "items": {"type": "string"}}
    }
  },
  "KServeTensorMetadata": {
    "type": "object",
    "required": ["name", "datatype", "shape"],
    "properties": {
      "name": {"type": "string"},
      "datatype": {"type": "string"},
      "shape": {"type": "array", "items": {"type": "integer"}}
    }
  },
  "KServeModelMetadata": {
    "type": "object",
    "required": ["name", "platform", "inputs", "outputs"],
    "properties": {
      "name": {"type": "string"},
      "versions": {"type": "array", "items": {"type": "string"}},
      "platform": {"type": "string"},
      "inputs": {"type": "array", "items": {"$ref": "#/components/schemas/KServeTensorMetadata"}},
      "outputs": {"type": "array", "items": {"$ref": "#/components/schemas/KServeTensorMetadata"}}
    }
  },
  "KServeModelConfig": {
    "type": "object",
    "description": "Triton's model configuration as JSON: name, platform, backend, max_batch_size, input, output.",
    "additionalProperties": true
  },
  "KServeTensor": {
    "type": "object",
    "required": ["name", "shape", "datatype"],
    "properties": {
      "name": {"type": "string"},
      "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
      "datatype": {"type": "string", "enum": ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BF16", "BYTES"]},
      "parameters": {"type": "object"},
      "data": {"type": "array"}
    }
  },
  "KServeInferRequest": {
    "type": "object",
    "required": ["inputs"],
    "properties": {
      "id": {"type": "string"},
      "parameters": {"type": "object"},
      "inputs": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/KServeTensor"}},
      "outputs": {
        "type": "array",
        "items": {
          "type": "object",
          "required": ["name"],
          "properties": {"name": {"type": "string"}, "parameters": {"type": "object"}}
        }
      }
    },
    "example": {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hello world"]}]}
  },
  "KServeInferReply": {
    "type": "object",
    "required": ["model_name", "outputs"],
    "properties": {
      "model_name": {"type": "string"},
      "model_version": {"type": "string"},
      "id": {"type": "string"},
      "parameters": {"type": "object"},
      "outputs": {"type": "array", "items": {"$ref": "#/components/schemas/KServeTensor"}}
    }
  },
  "KServeError": {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}}
  }
})json";

std::string StatusDescription(int status) {
  static const std::map<int, std::string> kReasons = {
      {400, "The request is malformed"},
      {401, "A missing or wrong API key"},
      {404, "No such model or route"},
      {413, "An input or the body is over a limit"},
      {415, "The body is not sent as application/json"},
      {422, "The body does not validate"},
      {424, "The executor failed"},
      {429, "The replicas' queues are full; retry later"},
      {500, "The executor's error"},
      {503, "No replica can answer"},
      {504, "The deadline passed"},
  };
  const auto it = kReasons.find(status);
  return it == kReasons.end() ? "Error" : it->second;
}

json Ref(const std::string& schema) { return json{{"$ref", "#/components/schemas/" + schema}}; }

json JsonContent(const std::string& schema) {
  return json{{"application/json", {{"schema", Ref(schema)}}}};
}

json Operation(const HttpRoute& route, const OpenApiOptions& options) {
  json op{{"operationId", route.operation_id}, {"summary", route.summary}, {"tags", {route.tag}}};
  if (!route.description.empty()) {
    op["description"] = route.description;
  }
  json parameters = json::array();
  for (std::size_t at = route.path.find('{'); at != std::string::npos;
       at = route.path.find('{', at + 1)) {
    const std::size_t end = route.path.find('}', at);
    parameters.push_back({{"name", route.path.substr(at + 1, end - at - 1)},
                          {"in", "path"},
                          {"required", true},
                          {"schema", {{"type", "string"}}}});
  }
  if (route.takes_deadline) {
    parameters.push_back(
        {{"name", "Gantry-Timeout-Ms"},
         {"in", "header"},
         {"required", false},
         {"description", "The request's deadline in milliseconds, carried to the replica."},
         {"schema", {{"type", "integer"}, {"minimum", 1}, {"maximum", 86400000}}}});
    parameters.push_back({{"name", "X-Request-Id"},
                          {"in", "header"},
                          {"required", false},
                          {"description",
                           "Names the request in the logs; echoed in the reply (1 to 128 printable "
                           "ASCII characters, else the gateway makes one)."},
                          {"schema", {{"type", "string"}, {"maxLength", 128}}}});
  }
  if (!parameters.empty()) {
    op["parameters"] = std::move(parameters);
  }
  if (!route.request_schema.empty()) {
    op["requestBody"] = {{"required", true}, {"content", JsonContent(route.request_schema)}};
  }
  json responses = json::object();
  json ok{{"description", "OK"}};
  if (!route.reply_schema.empty()) {
    ok["content"] = JsonContent(route.reply_schema);
  }
  responses["200"] = std::move(ok);
  for (int status : route.error_statuses) {
    json error{{"description", StatusDescription(status)}};
    if (!route.error_schema.empty()) {
      error["content"] = JsonContent(route.error_schema);
    }
    responses[std::to_string(status)] = std::move(error);
  }
  if (options.api_key && route.needs_api_key) {
    responses["401"] = {{"description", StatusDescription(401)},
                        {"content", JsonContent("JinaError")}};
    op["security"] = json::array({{{"bearer", json::array()}}});
  }
  op["responses"] = std::move(responses);
  return op;
}

}  // namespace

const json& OpenApiSchemas() {
  static const json* const kParsed = new json(json::parse(kSchemas));
  return *kParsed;
}

json OpenApiDocument(const std::vector<HttpRoute>& routes, const OpenApiOptions& options) {
  json paths = json::object();
  std::map<std::string, int> tag_order;
  json tags = json::array();
  for (const HttpRoute& route : routes) {
    if (!route.in_schema) {
      continue;
    }
    std::string method = route.method;
    for (char& c : method) {
      c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    paths[route.path][method] = Operation(route, options);
    if (tag_order.emplace(route.tag, static_cast<int>(tag_order.size())).second) {
      tags.push_back({{"name", route.tag}});
    }
  }
  json document{{"openapi", "3.1.0"},
                {"info",
                 {{"title", options.title},
                  {"version", options.version},
                  {"description",
                   "Jina's HTTP routes, the OpenAI embeddings API, text-embeddings-inference's "
                   "routes and KServe v2 (Open Inference Protocol) over one gateway."}}},
                {"tags", std::move(tags)},
                {"paths", std::move(paths)},
                {"components", {{"schemas", OpenApiSchemas()}}}};
  if (options.api_key) {
    document["components"]["securitySchemes"] = {
        {"bearer", {{"type", "http"}, {"scheme", "bearer"}}}};
  }
  return document;
}

}  // namespace gantry::internal
