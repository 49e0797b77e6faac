#!/usr/bin/env bash
# Entry point of the scrapejobs image: one component per container.
#   start.sh web|worker|browser|control|beat|flower|migrate  the component, exactly as `make run` starts it
#   start.sh writer                                   the control component's old name (warns)
#   start.sh manage <command> [args...]              a management command (create_tenant, ...)
# Command lines live in scrapejobs/processes.py only; sizes and ports come from the environment.
set -euo pipefail

cd "$(dirname "$0")/.."  # the project root, in the image and in a checkout

component="${1:-web}"
case "$component" in
  web | worker | browser | control | writer | beat | flower | migrate)
    exec python -m scrapejobs.processes "$component"
    ;;
  manage)
    shift
    exec python manage.py "$@"
    ;;
  *)
    echo "usage: start.sh web|worker|browser|control|beat|flower|migrate | manage <command> [args...]" >&2
    exit 64
    ;;
esac
