{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A layer whose weights are constants: its matrix-vector product as an adder graph
(shift-and-add terms with shared subexpressions, no multiplier), generated per
layer (@Cmvm/<Layer>.hs@: the weights, one named term per adder, one function
per register stage, its register stages as @type Depth@), whose last stage
also finishes the layer: a free-running pipeline ('stages', a
"K2C.Pipe".'Pipeline'), alone a stream stage ('cmvm': "K2C.Pipe".'pipeline'),
or composed with the layers of constants after it into one ('K2C.Pipe.>->').

= Hardware

* as a stream stage, an input register: the vector as it is accepted (the
  upstream's output queue is LUT RAM, whose read would otherwise be routed to
  the first adders within the first stage's cycle);
* the graph's @s@ register stages (its valid bit beside them), the last of
  which also finishes the layer before its register: the bias added to each
  exact product sum, one bit wider, then the layer's requantization and
  activation ('K2C.Activation.Finish'): the sum's carry chain and a
  truncation, a saturation's comparison or a ReLU's gate, counted as one more
  adder level of the graph (@s@ is the stages of its levels and that one);
* a table activation's two registers after them (@t = 2@);
* as a stream stage, 'pipeS''s output queue of @d + 2@ vectors and its count.

= Timing (exact)

'stages' holds @s + t@ registers ('CmvmStages'); 'cmvm' @d = 1 + s + t@
('CmvmDepth'). A vector accepted in cycle @a@ leaves the last register in
cycle @a + d@: 'pipeS''s rules, one vector a cycle with downstream ready and
@d + 1@ cycles of latency. A run of layers composed with '>->' is one such
stage whose @d@ is one plus the sum of their 'CmvmStages'.

= Arithmetic

The graph computes @x * W@ exactly on the inputs' raw integers, in the
accumulator's fraction bits; the finish adds the bias in the same bits and
rounds once: the engine's exact accumulator and finish, to the bit. A rounding
to nearest (ties toward +infinity) is @floor(x + h)@ with @h@ half an output
LSB: the generated bias includes @h@ and the finish truncates, so the finish
holds one carry chain, the bias's (the sum is one bit wider so that @h@ cannot
wrap it).
-}
module K2C.Cmvm
  ( cmvm
  , stages
  , windows
  , fit
  , CmvmDepth
  , CmvmStages
  ) where

import Clash.Prelude hiding (window)

import K2C.Activation (Finish (..), TableRegs)
import K2C.Pipe (Pipeline (..), PipelineDepth, pipeline, stageReg)
import K2C.Stream (Stream, mapS, (|>))
import K2C.Window (WindowShape, window)

-- | The registers of 'stages': the graph's @s@ (the finish in its last), a table's @t@.
type CmvmStages s t = s + t

-- | The registers of 'cmvm': the input register and 'CmvmStages'.
type CmvmDepth s t = PipelineDepth (CmvmStages s t)

-- | What 'cmvm' and 'stages' ask of their sizes and output type.
type Layer dom s n m ai af ci cf t o =
  ( HiddenClockResetEnable dom
  , KnownNat s, KnownNat n, KnownNat m, KnownNat ai, KnownNat af, KnownNat ci, KnownNat cf
  , TableRegs t, NFDataX o )

-- | The generated graph: @n@ raw inputs to @m@ exact sums in the accumulator's fraction
-- bits, which its last stage gives to the function it is given (the finish) before its register.
type Graph dom n m ai af ci cf o =
  (Vec m (Signed (ci + cf)) -> Vec m o) -> Signal dom (Maybe (Vec n (Signed (ai + af)))) -> Signal dom (Maybe (Vec m o))

-- | A layer of constant weights as a stream stage: 'stages' in "K2C.Pipe".'pipeline'.
cmvm
  :: forall dom s n m ai af ci cf o t
   . Layer dom s n m ai af ci cf t o
  => SNat s -> Graph dom n m ai af ci cf o -> Vec m (Signed (ci + 1 + cf)) -> Finish t (SFixed (ci + 1) cf) o
  -> Stream dom (Vec n (SFixed ai af)) (Vec m o)
cmvm s graph bias finish = pipeline (stages s graph bias finish)

-- | A layer of constant weights as a pipeline: @graph@ (the generated module's,
-- @s@ register stages from the raw inputs to the exact sums @x * W@ in the
-- accumulator's fraction bits, finished in its last stage), the bias in the
-- accumulator's bits (one integer bit wider), and the layer's finish.
stages
  :: forall dom s n m ai af ci cf o t
   . Layer dom s n m ai af ci cf t o
  => SNat s -> Graph dom n m ai af ci cf o -> Vec m (Signed (ci + 1 + cf)) -> Finish t (SFixed (ci + 1) cf) o
  -> Pipeline dom (CmvmStages s t) (Vec n (SFixed ai af)) (Vec m o)
stages SNat graph bias (Finish requant activate) = Pipeline pipe
  where
    pipe = tableRegs . graph (zipWith finish bias) . fmap (fmap (map unSF))
    finish b acc = activate (requant (sf (SNat @cf) (b + resize acc)))
    tableRegs
      | snatToNum (SNat @t) == (2 :: Int) = stageReg . stageReg
      | otherwise = id

-- | A convolution's windows as the graph's input vectors: "K2C.Window"'s
-- generator, each window flattened in Keras kernel order (rows, columns,
-- channels; wires only). Its stream goes straight into 'cmvm', which takes a
-- window every cycle.
windows
  :: (HiddenClockResetEnable dom, WindowShape h w kh kw sh sw c, NFDataX a)
  => SNat h -> SNat w -> SNat kh -> SNat kw -> SNat sh -> SNat sw
  -> Stream dom (Vec c a) (Vec (kh * kw * c) a)
windows h w kh kw sh sw = window h w kh kw sh sw |> mapS (concat . map concat)

-- | An operand at a term's width, modulo 2^b: a sum that fits its term's width
-- is exact whatever its operands' widths (two's complement), so an operand
-- wider than the term keeps its low bits ('resize' would keep its sign bit).
fit :: forall a b . (KnownNat a, KnownNat b) => Signed a -> Signed b
fit x = truncateB (resize x :: Signed (b + a))
