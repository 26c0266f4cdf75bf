// What each bridge operation does, separated from the sockets and threads that carry it: a
// request in, a reply out. The server decides where a request runs (docs/bridge.md,
// "Concurrency"); these functions only read and write the env they are given.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bridge/protocol.h"
#include "gym/env.h"

namespace perfdojo::bridge {

/// How the server runs an operation: what its dispatch switches on. A new route is a compile
/// error (-Wswitch) in the dispatch until it is handled there.
enum class Route {
  kHello,           ///< the handshake; answered on the I/O thread
  kPing,            ///< answered on the I/O thread
  kListBenchmarks,  ///< on the fast pool
  kMake,            ///< on the fast pool; makes a session
  kEnv,             ///< on the session's strand through Operation::run (inline when cheap)
  kFork,            ///< on the parent session's strand; makes a session
  kClose,           ///< on the session's strand; ends the session
};

/// What an env operation does: the result JSON of `req` on `e`, or a RequestError.
using EnvOp = std::string (*)(env::Env& e, const Request& req, const ConfigPolicy& policy);

/// One bridge operation. operations() is the only list of them: dispatch, the hello reply, the
/// unknown_op message and the docs check (tests/bridge) all read it.
struct Operation {
  std::string_view name;
  Route route;
  /// Acts on one session (the request carries "session").
  bool session = false;
  /// Cheap enough to run on the I/O thread for an idle deterministic session
  /// (docs/bridge.md, "Inline steps").
  bool cheap = false;
  /// For Route::kEnv: the operation itself; null for every other route.
  EnvOp run = nullptr;
};

/// Every operation, in the order docs/bridge.md lists them.
const std::vector<Operation>& operations();
/// The operation called `name`, or null.
const Operation* find_operation(std::string_view name);
/// Every operation name, in table order.
const std::vector<std::string>& operation_names();
/// Operations that act on one session (they carry "session").
bool is_session_op(const std::string& op);
/// The unknown_op error for a request whose op is `op`: the message lists every operation.
Error unknown_op_error(std::string_view op);

/// The result of "hello" once the version and token checked out.
std::string hello_result(const Limits& limits);
/// The result of "list_benchmarks".
std::string list_benchmarks_result(const Request& req);
/// Builds the env a "make" request describes. Throws RequestError (config_error, forbidden).
std::unique_ptr<env::Env> make_env(const Request& req, const ConfigPolicy& policy);
/// The result of "make" and "fork" for a new session `id`.
std::string session_result(uint64_t id, const env::Env& e);

/// The reply to an env operation (Route::kEnv: reset, step, action_mask, spaces, program, save,
/// restore, validate) on `e`. Bad requests leave `e` untouched and return an error reply.
std::string handle_session_op(env::Env& e, const Request& req, const ConfigPolicy& policy);
/// The same for `op`, already looked up (its route must be Route::kEnv).
std::string handle_session_op(const Operation& op, env::Env& e, const Request& req,
                              const ConfigPolicy& policy);

}  // namespace perfdojo::bridge
