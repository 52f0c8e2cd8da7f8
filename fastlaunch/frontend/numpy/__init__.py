"""The traced NumPy surface, one module per family; importing the package registers all of it
(in FAMILY_ORDER: each family imports only the ones before it)."""
from . import registry  # noqa: F401
from . import common  # noqa: F401
from . import ufuncs  # noqa: F401
from . import reductions  # noqa: F401
from . import indexing  # noqa: F401
from . import shaping  # noqa: F401
from . import linalg  # noqa: F401
from . import sorting  # noqa: F401
from . import creation  # noqa: F401
from . import differences  # noqa: F401
from . import methods  # noqa: F401

FAMILY_ORDER = ('registry', 'common', 'ufuncs', 'reductions', 'indexing', 'shaping', 'linalg',
                'sorting', 'creation', 'differences', 'methods')
