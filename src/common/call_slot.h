// A count of the calls a sync gRPC service holds, with a bound: each such
// call holds one server thread while it waits, so the bound is what keeps a
// flood of requests from growing a thread per call.
#ifndef GANTRY_COMMON_CALL_SLOT_H_
#define GANTRY_COMMON_CALL_SLOT_H_

#include <atomic>

namespace gantry::internal {

// One call counted against `limit` for as long as the slot lives; a call
// that is not admitted() should be refused at once (RESOURCE_EXHAUSTED).
// Thread safety: one slot per call; the shared counter is atomic.
class CallSlot {
 public:
  CallSlot(std::atomic<int>& in_flight, int limit)
      : in_flight_(in_flight),
        admitted_(in_flight.fetch_add(1, std::memory_order_relaxed) < limit) {}
  ~CallSlot() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }
  CallSlot(const CallSlot&) = delete;
  CallSlot& operator=(const CallSlot&) = delete;

  bool admitted() const { return admitted_; }

 private:
  std::atomic<int>& in_flight_;
  const bool admitted_;
};

}  // namespace gantry::internal

#endif  // GANTRY_COMMON_CALL_SLOT_H_
