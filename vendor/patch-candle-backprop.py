"""Rewrites candle-core's backprop.rs so that a gradient's first contribution is stored
as it is instead of being added to a zero-filled tensor (GradStore::accumulate)."""
import re, sys
src = open(sys.argv[1]).read()
lines = src.split("\n")
out = []
pending = {}  # var -> (arg, index in out of the let line)
let_re = re.compile(r"^(\s*)let (\w+) = grads\.or_insert\(([^()]+)\)\?;\s*$")
n = 0
i = 0
while i < len(lines):
    line = lines[i]
    m = let_re.match(line)
    if m:
        pending[m.group(2)] = (m.group(3), len(out))
        out.append(line)
        i += 1
        continue
    done = False
    for var, (arg, at) in list(pending.items()):
        am = re.match(r"^(\s*)\*" + var + r" = " + var + r"\.(add|sub)\(&(.*)\)\?(;?)\s*$", line)
        if am:
            indent, op, expr, semi = am.groups()
            if var in expr:
                expr = expr.replace(var + ".dims()", arg + ".dims()")
            if var in expr:
                break
            if re.fullmatch(r"[\w.]+", expr):
                owned = expr + ".clone()"
            elif (expr.startswith("(") and expr.endswith(")?")) or re.match(r"^\w+[.(]", expr):
                owned = expr
            else:
                owned = "(" + expr + ")"
            if op == "sub":
                owned = owned + ".neg()?"
            out[at] = None
            out.append(f"{indent}grads.accumulate({arg}, {owned})?{semi}")
            del pending[var]
            n += 1
            done = True
            break
    if not done:
        out.append(line)
    i += 1
text = "\n".join(l for l in out if l is not None)
# ToDevice read the device of the zero tensor it no longer makes: the argument's.
text = text.replace("grad.to_device(sum_grad.device())", "grad.to_device(arg.device())")
assert "sum_grad.device()" not in text
accumulate = '''
    /// Adds `grad` to the gradient of `tensor`; the first contribution is stored as it is
    /// (made contiguous if it is a view: backward kernels such as matmul expect
    /// contiguous gradients) instead of being added to a zero-filled tensor.
    fn accumulate(&mut self, tensor: &Tensor, grad: Tensor) -> Result<()> {
        match self.0.entry(tensor.id()) {
            Entry::Occupied(mut e) => {
                let sum = e.get().add(&grad)?;
                *e.get_mut() = sum;
            }
            Entry::Vacant(e) => {
                let grad = if grad.is_contiguous() { grad } else { grad.contiguous()? };
                e.insert(grad);
            }
        }
        Ok(())
    }
'''
anchor = "    fn or_insert(&mut self, tensor: &Tensor) -> Result<&mut Tensor> {"
assert anchor in text
text = text.replace(anchor, accumulate.lstrip("\n") + "\n" + anchor)
open(sys.argv[2], "w").write(text)
print(f"{text.count('grads.accumulate(')} accumulations rewritten", file=sys.stderr)
