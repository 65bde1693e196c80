/// The registry of weft's environment parameters: every WEFT_* variable weft reads is declared once, in one table,
/// with its name, type, default and help text. `weft-info --params` prints the table; the getters refuse names that are
/// not in it, so a typo inside weft fails loudly instead of silently reading an unset variable.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

/// One declared environment parameter.
struct ParamInfo {
  /// The variable's name, e.g. "WEFT_BOOTSTRAP_TIMEOUT_MS". A pattern entry carries placeholders in angle brackets
  /// ("WEFT_TRANSPORT_<NAME>_<KEY>") and stands for every variable of that shape.
  std::string name;
  /// "string", "int", "bool", "list" (comma-separated), "path-list" (colon-separated) or, for the pattern entry,
  /// "typed per key" (the key's own type decides).
  std::string type;
  /// The value used when the variable is unset, as text; empty when there is none.
  std::string defaultValue;
  /// One or two sentences: what it does and what values it takes.
  std::string help;
};

/// A snapshot of environment variables, name to value: what `processEnvironment()` returns and what the `env`
/// overloads below (and Config::applyEnvironment) read instead of the live environment, so tests can pass their own.
using Environment = std::map<std::string, std::string>;

/// Every declared parameter, in a stable order (the order of the table in core/params.cc). Never empty.
const std::vector<ParamInfo>& allParams();

/// The declaration that covers `name` (an exact entry, or the pattern entry for WEFT_TRANSPORT_<NAME>_<KEY> names);
/// nullptr when `name` was never declared.
const ParamInfo* findParam(std::string_view name);

/// Every variable of the current process environment (launcher variables such as RANK or OMPI_* included). Thread
/// safety: as getenv (no concurrent setenv).
Environment processEnvironment();

/// The value of declared parameter `name` from the process environment, or nullopt when unset or set to "" (an empty
/// value counts as unset for every parameter). Throws Error(kInvalidArgument) when `name` was never declared.
std::optional<std::string> paramString(std::string_view name);
/// As above, reading `env` instead of the process environment.
std::optional<std::string> paramString(std::string_view name, const Environment& env);

/// The value of declared integer parameter `name` (decimal, optional sign, no spaces), its declared default when
/// unset. Throws Error(kConfigError) naming the variable when the value is malformed or out of int64 range, or when it
/// is unset and has no default; Error(kInvalidArgument) when `name` was never declared or is declared with another
/// type (names of the WEFT_TRANSPORT_<NAME>_<KEY> pattern take any getter: their key decides the type).
int64_t paramInt(std::string_view name);
/// As above, reading `env`.
int64_t paramInt(std::string_view name, const Environment& env);

/// The value of declared integer parameter `name`, or nullopt when unset and without default; errors as paramInt.
std::optional<int64_t> paramIntIfSet(std::string_view name);
/// As above, reading `env`.
std::optional<int64_t> paramIntIfSet(std::string_view name, const Environment& env);

/// The value of declared boolean parameter `name` (1/0, true/false, yes/no, on/off, any case), its declared default
/// when unset. Throws Error(kConfigError) naming the variable when malformed, or when unset without a default;
/// Error(kInvalidArgument) when `name` was never declared or is not of type bool.
bool paramBool(std::string_view name);
/// As above, reading `env`.
bool paramBool(std::string_view name, const Environment& env);

/// Parses `text` as a decimal int64 the way paramInt does; nullopt when malformed. Shared with the config file code.
std::optional<int64_t> parseParamInt(std::string_view text);

/// Parses `text` as a boolean the way paramBool does; nullopt when malformed.
std::optional<bool> parseParamBool(std::string_view text);

}  // namespace weft
