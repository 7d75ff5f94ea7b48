"""Sphinx configuration of the skdp_label documentation.

Build (from the repository root, with ``pip install -e ".[docs]"``)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # build the checkout, even when not installed

import skdp_label

os.environ.setdefault("MPLBACKEND", "Agg")  # gallery scripts draw without a display

project = "skdp_label"
author = "skdp_label developers"
copyright = "2025, skdp_label developers"
release = skdp_label.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "gen_modules", "plot_*.py", "**/*.ipynb", "auto_examples/*.md5",
                    "auto_examples/*.json", "auto_examples/*.zip"]

# -- API reference -------------------------------------------------------
autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
autodoc_typehints = "none"  # numpydoc docstrings carry the types
numpydoc_show_class_members = False  # autosummary lists the methods
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# No intersphinx: CI builds offline, and an unreachable inventory is a warning.


def _skip_member(app, what, name, obj, skip, options):
    """Hide scikit-learn's generated metadata-routing setters (set_*_request)."""
    if name.startswith("set_") and name.endswith("_request"):
        return True
    return skip


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)


# -- Markdown pages ------------------------------------------------------
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# -- Gallery -------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": [str(ROOT / "examples" / "gallery")],
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "abort_on_example_error": True,
    "show_memory": False,
    "reference_url": {"skdp_label": None},
    "doc_module": ("skdp_label",),
    "backreferences_dir": "gen_modules/backreferences",
}
# The gallery's simulations warn by design when they score on true test labels.
warnings.filterwarnings("ignore", category=skdp_label.PrivacyLeakWarning)

# -- HTML ----------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"skdp_label {release}"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_sidebars = {"changelog": [], "bibliography": []}
