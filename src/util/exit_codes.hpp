// Exit codes of hetpar processes; the launcher reads them to tell the rank
// that caused a failure from the ranks that only lost a peer.
#pragma once

namespace hetpar {

inline constexpr int kExitError = 1;            // any other error
inline constexpr int kExitConfigError = 2;      // bad configuration or usage: nothing started
inline constexpr int kExitInjectedFault = 3;    // HETPAR_FAULT=RANK:STEP, for tests
inline constexpr int kExitCollectiveError = 4;  // a collective failed: lost peer or timeout
inline constexpr int kExitDiverged = 5;         // the loss or gradient norm became NaN/inf: a recorded outcome
inline constexpr int kExitOutOfMemory = 6;      // a rank ran out of memory: a recorded outcome

}  // namespace hetpar
