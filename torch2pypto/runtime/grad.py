"""Autograd: a kernel's result carries torch's gradient of the original expression."""

import torch


class _TorchGradient(torch.autograd.Function):
    """The kernel's result forward; backward, torch's gradient of the original expression.

    The result is the Function's own tensor, as torch's op gives: autograd forbids changing in place
    an output that is a view (a kernel's result is one of its padded buffer, which is detached
    from it) or an input's storage (which is copied)."""

    @staticmethod
    def forward(ctx, kernel_path, torch_path, *args):
        ctx.torch_path = torch_path
        ctx.args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        result = kernel_path(*args)
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        return result.clone() if result.untyped_storage().data_ptr() in inputs else result.detach()

    @staticmethod
    def backward(ctx, grad):
        wants = ctx.needs_input_grad[2:]
        args = [a.requires_grad_() if w else a for a, w in zip(ctx.args, wants)]
        with torch.enable_grad():
            result = ctx.torch_path(*args)
        # allow_unused: a tensor read for its dtype only (``.to(q.dtype)``) has no gradient
        grads = iter(torch.autograd.grad(result, [a for a, w in zip(args, wants) if w], grad, allow_unused=True))
        return (None, None, *(next(grads) if w else None for w in wants))


def _with_torch_grad(kernel_path, torch_path, *args):
    """kernel_path(*args); when autograd records and a tensor argument requires grad, the result
    carries torch's gradient (recomputed from the original expression in backward)."""
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return _TorchGradient.apply(kernel_path, torch_path, *args)
    return kernel_path(*args)


class _SelectedGradient(torch.autograd.Function):
    """A selection's values and indices (topk, sort) from the kernel; backward, torch's: each
    value's gradient goes to the input element its index names along the dim, zero elsewhere."""

    @staticmethod
    def forward(ctx, kernel_path, dim, input):
        values, indices = kernel_path(input)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.dim, ctx.shape = dim, input.shape
        return values.detach(), indices.detach()

    @staticmethod
    def backward(ctx, grad, _):
        (indices,) = ctx.saved_tensors
        return None, None, grad.new_zeros(ctx.shape).scatter(ctx.dim, indices, grad)


def _with_selected_grad(kernel_path, dim, input):
    """kernel_path(input), a (values, indices) pair of torch's return type; when autograd records
    and input requires grad, the values carry torch's gradient of a selection along dim."""
    if not (torch.is_grad_enabled() and input.requires_grad):
        return kernel_path(input)
    kind = []

    def pair(x):
        result = kernel_path(x)
        kind.append(type(result))
        return tuple(result)

    result = _SelectedGradient.apply(pair, dim, input)
    return kind[0](result)


class _TorchGradients(torch.autograd.Function):
    """As _TorchGradient, for a kernel of several results (a grouped region's, one per group): the
    results forward; backward, torch's gradients of the original statements' results that reach
    the loss (an input only the others read gets none, as in torch)."""

    @staticmethod
    def forward(ctx, kernel_path, torch_path, *args):
        ctx.set_materialize_grads(False)
        ctx.torch_path = torch_path
        ctx.args = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        return tuple(r.clone() if r.untyped_storage().data_ptr() in inputs else r.detach() for r in kernel_path(*args))

    @staticmethod
    def backward(ctx, *grads):
        wants = ctx.needs_input_grad[2:]
        args = [a.requires_grad_() if w else a for a, w in zip(ctx.args, wants)]
        with torch.enable_grad():
            results = [(r, g) for r, g in zip(ctx.torch_path(*args), grads) if g is not None and r.requires_grad]
        inputs = [a for a, w in zip(args, wants) if w]
        if not results:
            return (None,) * (2 + len(wants))
        found = iter(torch.autograd.grad([r for r, _ in results], inputs, [g for _, g in results], allow_unused=True))
        return (None, None, *(next(found) if w else None for w in wants))


def _with_torch_grads(kernel_path, torch_path, *args):
    """_with_torch_grad for a kernel_path and a torch_path that return a tuple of results."""
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return _TorchGradients.apply(kernel_path, torch_path, *args)
    return kernel_path(*args)


class _HeldGradients(torch.autograd.Function):
    """As _TorchGradients, for a region that inlines submodules: its torch path reads their tensors
    (a norm's weight) from the submodules, so those, the last `held` arguments, stay themselves in
    backward (the others are detached copies) and get torch's gradient, once each."""

    @staticmethod
    def forward(ctx, kernel_path, torch_path, held, *args):
        ctx.set_materialize_grads(False)
        ctx.torch_path, ctx.own = torch_path, len(args) - held
        ctx.args = [a.detach() if isinstance(a, torch.Tensor) and i < ctx.own else a for i, a in enumerate(args)]
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        results = kernel_path(*args)
        results = results if isinstance(results, tuple) else (results,)
        return tuple(r.clone() if r.untyped_storage().data_ptr() in inputs else r.detach() for r in results)

    @staticmethod
    def backward(ctx, *grads):
        wants, seen = list(ctx.needs_input_grad[3:]), set()
        for i in range(ctx.own, len(wants)):  # a tensor held twice (one weight in two norms) gets its gradient once
            wants[i] = wants[i] and id(ctx.args[i]) not in seen
            seen.add(id(ctx.args[i]))
        args = [a.requires_grad_() if w and i < ctx.own else a for i, (a, w) in enumerate(zip(ctx.args, wants))]
        with torch.enable_grad():
            results = ctx.torch_path(*args[: ctx.own])
            results = results if isinstance(results, tuple) else (results,)
            results = [(r, g) for r, g in zip(results, grads) if g is not None and r.requires_grad]
        if not results:
            return (None,) * (3 + len(wants))
        inputs = [a for a, w in zip(args, wants) if w]
        found = iter(torch.autograd.grad([r for r, _ in results], inputs, [g for _, g in results], allow_unused=True))
        return (None, None, None, *(next(found) if w else None for w in wants))


def _with_held_grads(kernel_path, torch_path, *args, held=()):
    """_with_torch_grads for a region that inlines submodules: kernel_path(*args, *held);
    torch_path(*args) reads the tensors `held` from the submodules, and autograd gives them
    torch's gradient too. The result is a tensor, or a tuple of several, as torch_path's."""
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *held)):
        results = _HeldGradients.apply(kernel_path, torch_path, len(held), *args, *held)
        return results if len(results) > 1 else results[0]
    return kernel_path(*args, *held)
