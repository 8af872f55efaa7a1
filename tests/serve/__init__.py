"""The service's tests. A package, so that this folder's conftest is imported as serve.conftest and
the root conftest stays the module ``conftest`` that tests import helpers from."""
