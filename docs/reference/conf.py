"""Sphinx settings of the API reference (``python docs/build_api.py``; CI builds it with -W)."""

project = "dgn"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_attr_annotations = True
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
