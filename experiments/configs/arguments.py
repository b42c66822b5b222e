"""The one way a config file takes its argument, `--config=FILE.py:ARGUMENT`, and the
entrypoints' flag parsing (`parse_flags`, which maps a flat config flag of before the groups
to its group).

After big_vision's convention: ARGUMENT is comma-separated `key=value` pairs, e.g.

    --config=experiments/configs/sgd_generalized.py:variant=looped,tier=short

A bare value fills the first key not yet set, in the order the file declares them, so
`sgd_generalized.py:looped,short` and `sgd_law.py:stationary` (the commands the committed
runs record) mean the same. Every config file's `get_config(argument=None)` starts with
`parse(argument, KEY=(default, allowed), ...)`.
"""

import sys

import ml_collections
from absl import app

from inverse_depth import config as config_lib
from inverse_depth.config import ConfigError


def parse(argument: str | None, **keys: tuple[str, tuple[str, ...]]) -> ml_collections.ConfigDict:
  """`argument` read against `keys` ({key: (default, allowed values)}, in positional order):
  a ConfigDict holding every key, at its default where `argument` does not set it. Raises
  ConfigError naming the key and its allowed values for an unknown key or value, a key set
  twice, or more bare values than keys."""
  values = {key: default for key, (default, _) in keys.items()}
  given: set[str] = set()
  for item in filter(None, (argument or "").split(",")):
    key, has_key, value = item.partition("=")
    if not has_key:
      key, value = next((k for k in keys if k not in given), None), item
      if key is None:
        raise ConfigError(f"config argument {argument!r}: too many values; this file takes "
                          + (", ".join(f"{k}=VALUE" for k in keys) or "no argument"))
    key, value = key.strip(), value.strip()
    if key not in keys:
      raise ConfigError(f"config argument {argument!r}: unknown key {key!r}; allowed "
                        + (", ".join(keys) or "none (this file takes no argument)"))
    if key in given:
      raise ConfigError(f"config argument {argument!r}: {key} is set twice")
    allowed = keys[key][1]
    if value not in allowed:
      raise ConfigError(f"config argument {key} {value!r} does not exist: allowed "
                        f"{', '.join(allowed)}")
    values[key] = value
    given.add(key)
  return ml_collections.ConfigDict(values)


def parse_flags(argv: list[str]):
  """absl's flag parsing (an entrypoint's `app.run(main, flags_parser=parse_flags)`), after
  mapping the flat config flags of before the groups (config.map_flat_flags) with a message
  each, in sys.argv too: the config flag reads its overrides from there."""
  argv, messages = config_lib.map_flat_flags(argv)
  for message in messages:
    print(message, file=sys.stderr)
  sys.argv = argv
  return app.parse_flags_with_usage(argv)
