// What each bridge operation does, separated from the sockets and threads that carry it: a
// request in, a reply out. The server decides where a request runs (docs/bridge.md,
// "Concurrency"); these functions only read and write the env they are given.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bridge/protocol.h"
#include "gym/env.h"

namespace perfdojo::bridge {

/// Every operation name, in the order docs/bridge.md lists them.
const std::vector<std::string>& operation_names();
/// Operations that act on one session (they carry "session").
bool is_session_op(const std::string& op);

/// The result of "hello" once the version and token checked out.
std::string hello_result(const Limits& limits);
/// The result of "list_benchmarks".
std::string list_benchmarks_result(const Request& req);
/// Builds the env a "make" request describes. Throws RequestError (config_error, forbidden).
std::unique_ptr<env::Env> make_env(const Request& req, const ConfigPolicy& policy);
/// The result of "make" and "fork" for a new session `id`.
std::string session_result(uint64_t id, const env::Env& e);

/// The reply to a session operation (reset, step, action_mask, spaces, save, restore,
/// validate) on `e`. Bad requests leave `e` untouched and return an error reply.
std::string handle_session_op(env::Env& e, const Request& req, const ConfigPolicy& policy);

}  // namespace perfdojo::bridge
