"""Rewrites candle-core's backprop.rs so that a gradient's first contribution is stored
as it is instead of being added to a zero-filled tensor (GradStore::accumulate), and an
index_select's gradient rows are added in place into a gradient no other tensor shares
(GradStore::index_add_in_place, with Tensor::is_sole_owner added to tensor.rs), and
the CPU sum over leading dimensions (a bias's or a broadcast's gradient) runs row after
row instead of dividing out every element's index (cpu_backend/mod.rs), and
Tensor::backward_with calls back as each variable's gradient becomes final
(Tensor::backward_from: the same from a given output gradient).

    patch-candle-backprop.py PRISTINE/src OUT/src
        (reads and writes backprop.rs, tensor.rs, cpu_backend/mod.rs)
"""
import os, re, sys
src_dir, out_dir = sys.argv[1], sys.argv[2]
src = open(os.path.join(src_dir, "backprop.rs")).read()
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

# An index_select's backward (an embedding lookup's) added its rows with the out-of-place
# index_add: a copy of the whole gradient (GPT-2's tied 50304 x 768 embedding and head:
# 154 MB) to add a few rows into it.
select_old = """                    Op::IndexSelect(arg, indexes, dim) => {
                        let sum_grad = grads.or_insert(arg)?;
                        // index_select accepts strided ids but index_add requires contiguous ones.
                        let indexes = indexes.contiguous()?;
                        *sum_grad = sum_grad.index_add(&indexes, &grad, *dim)?;
                    }"""
select_new = """                    Op::IndexSelect(arg, indexes, dim) => {
                        // index_select accepts strided ids but index_add requires contiguous ones.
                        let indexes = indexes.contiguous()?;
                        if !grads.index_add_in_place(arg, &indexes, &grad, *dim)? {
                            let sum_grad = grads.or_insert(arg)?;
                            *sum_grad = sum_grad.index_add(&indexes, &grad, *dim)?;
                        }
                    }"""
assert select_old in text
text = text.replace(select_old, select_new)
in_place = '''
    /// Adds the rows of `src` into rows `ids` of the gradient of `tensor` in place, as
    /// `index_add` on dimension 0 would, where that gradient exists and is a contiguous f32
    /// CPU matrix that no other tensor shares; returns whether it did. The same adds in
    /// the same order as the out-of-place `index_add`: the same bits, without its copy.
    fn index_add_in_place(&mut self, tensor: &Tensor, ids: &Tensor, src: &Tensor, dim: usize) -> Result<bool> {
        use crate::{CpuStorage, DType, Storage};
        let Some(acc) = self.0.get(&tensor.id()) else {
            return Ok(false);
        };
        let fits = dim == 0
            && acc.rank() == 2
            && acc.dtype() == DType::F32
            && src.dtype() == DType::F32
            && ids.dtype() == DType::U32
            && acc.device().is_cpu()
            && acc.layout().is_contiguous()
            && acc.layout().start_offset() == 0
            && acc.is_sole_owner();
        if !fits {
            return Ok(false);
        }
        let (rows, width) = acc.dims2()?;
        let ids = ids.flatten_all()?.to_vec1::<u32>()?;
        let src = src.flatten_all()?.to_vec1::<f32>()?;
        if src.len() != ids.len() * width {
            return Ok(false);
        }
        let mut storage = acc.storage_mut();
        let Storage::Cpu(CpuStorage::F32(data)) = &mut *storage else {
            return Ok(false);
        };
        for (row, &id) in src.chunks_exact(width).zip(&ids) {
            let id = id as usize;
            if id >= rows {
                Err(Error::InvalidIndex { op: "index-add", index: id, size: rows }.bt())?
            }
            for (d, &s) in data[id * width..(id + 1) * width].iter_mut().zip(row) {
                *d += s
            }
        }
        Ok(true)
    }
'''
text = text.replace(anchor, in_place.lstrip("\n") + "\n" + anchor)
# 4. A callback where each variable's gradient is final: the sorted nodes put a variable
# after every op that reads it, so reaching it in the loop means its gradient is complete
# (data-parallel buckets start their sums there while the rest of backprop runs).
backward_old = """    pub fn backward(&self) -> Result<GradStore> {
        let sorted_nodes = self.sorted_nodes();
        let mut grads = GradStore::new();
        grads.insert(self, self.ones_like()?.contiguous()?);
        for node in sorted_nodes.iter() {
            if node.is_variable() {
                continue;
            }"""
backward_new = """    pub fn backward(&self) -> Result<GradStore> {
        self.backward_with(|_, _| Ok(()))
    }

    /// [`Tensor::backward`], calling `on_final(variable, grads)` as soon as a variable's
    /// gradient is complete (every op that reads the variable has been differentiated),
    /// while the rest of the backward pass is still to run. The callback may take the
    /// gradient out of `grads`.
    pub fn backward_with(
        &self,
        on_final: impl FnMut(&Tensor, &mut GradStore) -> Result<()>,
    ) -> Result<GradStore> {
        self.backward_from(&self.ones_like()?, on_final)
    }

    /// [`Tensor::backward_with`] from `grad`, the gradient of some loss with respect to
    /// this tensor (of its shape), instead of this tensor taken as the loss: the backward
    /// of a part of a graph, driven by hand.
    pub fn backward_from(
        &self,
        grad: &Tensor,
        mut on_final: impl FnMut(&Tensor, &mut GradStore) -> Result<()>,
    ) -> Result<GradStore> {
        if grad.shape() != self.shape() {
            crate::bail!("backward_from: a gradient of {:?} for a tensor of {:?}", grad.shape(), self.shape())
        }
        let sorted_nodes = self.sorted_nodes();
        let mut grads = GradStore::new();
        grads.insert(self, grad.contiguous()?);
        for node in sorted_nodes.iter() {
            if node.is_variable() {
                on_final(node, &mut grads)?;
                continue;
            }"""
assert backward_old in text
text = text.replace(backward_old, backward_new)
open(os.path.join(out_dir, "backprop.rs"), "w").write(text)
print(f"{text.count('grads.accumulate(')} accumulations rewritten", file=sys.stderr)

tensor = open(os.path.join(src_dir, "tensor.rs")).read()
anchor = "    /// Acquire write lock on storage and returns guard."
assert anchor in tensor
sole = """    /// Whether this handle is the only one on its storage (no clone of it, no view of
    /// it): an in-place write through it changes no other tensor.
    pub(crate) fn is_sole_owner(&self) -> bool {
        Arc::strong_count(&self.0) == 1 && Arc::strong_count(&self.storage) == 1
    }

"""
open(os.path.join(out_dir, "tensor.rs"), "w").write(tensor.replace(anchor, sole + anchor))

# ReduceSum over the leading dimensions of a contiguous tensor (the gradient of a bias or
# of any broadcast over batch and time) found each element's destination with a divmod
# per reduced dimension: about 30 ms of a GPT-2 124M step. The destination of element i
# is i % (the kept size) there, so the rows are added in turn: the same adds in the same
# order, the same bits.
backend = open(os.path.join(src_dir, "cpu_backend", "mod.rs")).read()
anchor = """                    return Ok(dst);
                };
                for (unstr_index, &src) in src.iter().enumerate() {"""
assert backend.count(anchor) == 1
leading = """                    return Ok(dst);
                };
                let reduce_over_first_dims =
                    self.reduce_dims.iter().enumerate().all(|(i, &v)| v == i);
                if reduce_over_first_dims && !dst.is_empty() {
                    let kept = dst.len();
                    for row in src.chunks_exact(kept) {
                        for (d, &s) in dst.iter_mut().zip(row) {
                            *d += s;
                        }
                    }
                    return Ok(dst);
                }
                for (unstr_index, &src) in src.iter().enumerate() {"""
os.makedirs(os.path.join(out_dir, "cpu_backend"), exist_ok=True)
open(os.path.join(out_dir, "cpu_backend", "mod.rs"), "w").write(backend.replace(anchor, leading))
