// Placeholder for train_agent until the agents module (LibTorch Max-Q DQN) lands; see the open
// agents issue. It exits 0 so `scripts/run train_agent` shows where the project stands instead of
// failing, and points at the parts that already work.
#include <cstdio>

int main() {
  std::puts(
      "train_agent: the RL agent is not built yet (the agents issue is still open).\n"
      "\n"
      "What exists today, through the `perfdojo` command line:\n"
      "  scripts/run perfdojo kernels                 list the kernels in kernels/\n"
      "  scripts/run perfdojo check FILE              parse and check a .pdj kernel\n"
      "  scripts/run perfdojo fmt FILE                print a kernel in canonical form\n"
      "  scripts/run perfdojo run FILE --seed S       run a kernel in the reference interpreter\n"
      "Each accepts --json. Tests: scripts/test");
  return 0;
}
