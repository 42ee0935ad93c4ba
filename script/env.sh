# script/env.sh — sourced by the project's scripts (bash) before anything
# else: an empty environment (`env -i`, a bare cron or CI job) has neither
# HOME nor an exported PATH. bash then gives itself a default search path
# but exports none, so the programs it starts (CMake locates its own
# modules through PATH) find nothing. Each missing one gets what a login
# would give: HOME from the password database, the standard directories.
if [ -z "${HOME:-}" ]; then
  HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
  export HOME
fi
if [ -z "$(printenv PATH)" ]; then
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
fi
