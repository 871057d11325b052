"""Applications built on the library: the ``hypann`` command line (:mod:`hypann.apps.cli`),
the demo (:mod:`hypann.apps.demo`) and the paper reproduction (:mod:`hypann.apps.reproduce`).

They sit on top of every other layer and nothing in the library imports them.
"""
