// A self-check of a job's process groups: each group reduces its members'
// job ranks and gathers them, and the world exchanges uneven all-to-all-v
// rows; every result is compared with the value computed locally.
#pragma once

#include "dist/module_groups.hpp"

namespace hetpar {

// Returns how many collectives were checked; throws std::runtime_error on the
// first wrong value (a layout or group mix-up shows up as a wrong sum).
int check_job_groups(Runtime& runtime, JobGroups& groups, int step);

}  // namespace hetpar
