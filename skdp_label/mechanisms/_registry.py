"""Mechanism names, so that estimators can select mechanisms by string."""

_REGISTRY = {}


_CANONICAL = set()


def register_mechanism(name, *aliases, task):
    """Class decorator: make a mechanism available as ``name`` (and aliases).

    ``task`` is ``'regression'`` or ``'classification'``.
    """

    def decorate(cls):
        for n in (name, *aliases):
            if n in _REGISTRY and _REGISTRY[n][0] is not cls:
                raise ValueError(f"mechanism name {n!r} is registered twice")
            _REGISTRY[n] = (cls, task)
        _CANONICAL.add(name)
        return cls

    return decorate


def mechanism_names(task=None, *, aliases=False):
    """Registered names (one per mechanism unless ``aliases``), for one task or all."""
    return sorted(
        n for n, (_, t) in _REGISTRY.items() if task in (None, t) and (aliases or n in _CANONICAL)
    )


def get_mechanism_class(name, task=None):
    """The mechanism class registered as ``name``."""
    if name not in _REGISTRY or (task is not None and _REGISTRY[name][1] != task):
        raise ValueError(
            f"Unknown {task + ' ' if task else ''}mechanism {name!r}; "
            f"choose one of {mechanism_names(task, aliases=True)}."
        )
    return _REGISTRY[name][0]


def make_mechanism(name, *, task=None, **params):
    """Build the mechanism registered as ``name``.

    ``params`` are the common public inputs (``epsilon``, ``bounds``,
    ``domain``, ``classes``, ``accountant``, ``random_state`` ...); those the
    mechanism's constructor does not take are dropped, so callers can pass
    one set of inputs to any mechanism, except ``None`` values, which are
    always droppable. Unknown names raise ``ValueError``.
    """
    import inspect

    cls = get_mechanism_class(name, task)
    accepted = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in params.items() if k in accepted})
