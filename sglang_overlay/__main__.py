from .interrupts import exit_at_start

exit_at_start()

from .entry import main  # noqa: E402

raise SystemExit(main())
