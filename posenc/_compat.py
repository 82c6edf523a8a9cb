"""Loading state_dicts saved from the tutorial's classes (`posenc.seed`) into the corrected ones."""


def drop_derived_keys(*keys: str):
    """A load_state_dict pre-hook that discards tables the tutorial stored as persistent buffers.

    The corrected modules rebuild those tables (sinusoidal `pe`, RoPE `inv_freq`, `sin_cached`,
    `cos_cached`) at construction and keep them non-persistent, so the saved copies carry no
    information; dropping them lets a tutorial state_dict load with strict=True.
    """

    def hook(module, state_dict, prefix, *args, **kwargs):
        for key in keys:
            state_dict.pop(prefix + key, None)

    return hook
