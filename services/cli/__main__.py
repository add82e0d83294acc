import sys

from sluice_services.cli.main import main

sys.exit(main())
