// Merging the replies of a Flow step's several `needs` into the one request
// that step receives, the way Jina (docarray v2) reduces them. Documents are
// matched by id, on the protobufs (the gateway never builds Documents):
//
// - The first reply (in the order of `needs`) is the base: its header,
//   parameters and routes are kept; routes of the others that it lacks are
//   appended.
// - A document whose id is not yet in the result is appended, so the result
//   holds the first reply's documents in order, then new ones in order.
// - Two documents with the same id are merged field by field (docarray's
//   BaseDoc.update, which Jina's reduce uses): a field set on the later one
//   replaces the earlier one's (so `text`, `embedding` and other tensors from
//   the later branch win); `tags` and other dicts are merged key by key, the
//   later branch winning a key both set; lists and tuples are concatenated,
//   sets joined; nested documents are merged recursively and nested
//   document lists (chunks, matches) are merged by id in the same way.
//
// Thread safety: the functions are stateless and safe for concurrent use.
#ifndef GANTRY_GATEWAY_REQUEST_MERGE_H_
#define GANTRY_GATEWAY_REQUEST_MERGE_H_

#include <gantry/status.h>

#include <vector>

#include "jina/jina.pb.h"

namespace gantry::internal {

// Merges `parts` (at least one) into `parts[0]`. Documents sent as
// `docs_bytes` are decoded first; the result always uses `docs`. An
// undecodable `docs_bytes` is InvalidArgument naming the part's index.
Status MergeRequests(std::vector<jina::DataRequestProto>& parts);

// Merges the documents of `right` into `left` by id, as above.
void MergeDocLists(docarray::DocListProto* left, docarray::DocListProto* right);

}  // namespace gantry::internal

#endif  // GANTRY_GATEWAY_REQUEST_MERGE_H_
