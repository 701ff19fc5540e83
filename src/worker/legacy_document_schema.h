// The JSON schema of Jina's default document type, LegacyDocumentJina, exactly
// as pydantic gives it (`LegacyDocumentJina.schema()`, jina 3.34 / docarray
// 0.40), for endpoint_discovery: Jina's gateway compares it for equality to
// pick its own class, so any difference would make it build a different
// model. The text lives in legacy_document_schema.json; the build embeds it.
#ifndef GANTRY_WORKER_LEGACY_DOCUMENT_SCHEMA_H_
#define GANTRY_WORKER_LEGACY_DOCUMENT_SCHEMA_H_

namespace gantry::internal {

extern const char* const kLegacyDocumentSchema;

}  // namespace gantry::internal

#endif  // GANTRY_WORKER_LEGACY_DOCUMENT_SCHEMA_H_
