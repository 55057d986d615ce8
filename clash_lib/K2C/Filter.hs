{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies,
             NoStarIsType, RankNTypes, PolyKinds, AllowAmbiguousTypes, TupleSections #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=8 #-}
{-|
The arithmetic of the processing elements (PEs): what one PE does in one
cycle with one chunk of the window and one ROM word (contract steps 1 to 3,
per chunk).

A PE of a layer computed in @b@ cycles per window (see "K2C.Engine") sees the
window in @b@ chunks @x_t@ of @ch@ values and, in the same cycles, the chunks
@(w_t, bias_t)@ of its filter from the ROM (@bias_0@ is the filter's bias,
@bias_t = 0@ for @t > 0@). With

@S_t = sum_j x_t[j] * w_t[j] + bias_t@   (exact)

the accumulator register @SFixed ci cf@ holds

@acc_0 = sat(S_0)@,   @acc_t = sat(acc_(t-1) + S_t)@   for @t = 1 .. b-1@,

where @sat@ saturates to the range of @SFixed ci cf@ (clamps to its minimum
or maximum; never wraps) and every sum inside @sat@ is exact. @acc_(b-1)@ is
the filter's result. When the accumulator has the contract's exact width
(@cf = af + wf@, @ci@ from docs/guide/contract.md, bias in the weight format) no
partial sum can reach the clamps, so @acc_(b-1)@ is the exact dot product
plus bias whatever @b@ is. A narrower accumulator chosen by a user saturates
in exactly this order, chunk by chunk.

= Hardware per PE

* @ch@ multipliers (@mul@: all @BitSize a + BitSize w@ product bits kept);
* a balanced adder tree over the @ch@ products and the bias field, each
  sign-extended and shifted to @cf@ fraction bits, in a width that cannot
  overflow ('ChunkBits');
* one adder with the accumulator, one bit wider than the wider of the two
  (@Max ('ChunkBits') (ci + cf) + 1@ bits: exact), then the clamp to
  @SFixed ci cf@ (two comparisons with constants and a multiplexer).
  With @b = 1@ there is no accumulator adder (the accumulator input is the
  constant 0), and no clamp either when @ci + cf >= 'ChunkBits'@ (true for
  the contract's exact accumulator): then no sum can leave the range.

= Pipelined PEs

'chunkTerms' are the @ch + 1@ aligned terms of @S_t@ (the multipliers'
outputs, which a pipelined engine registers), and 'adderTree' sums them in
a balanced tree of @TreeLevels ch = ceil(log2(ch + 1))@ levels with a
register after every @l@-th level: the same exact sum as 'chunkSum', @l@
levels of adders (carry chains) per clock cycle.

(@-fconstraint-solver-iterations=8@: the @CLog@ in 'ChunkBits' makes GHC's
constraint solver, with the typelits plugins, need more than its default 4
iterations for 'chunkSum'.)
-}
module K2C.Filter
  ( Accumulates
  , ChunkInt
  , ChunkBits
  , TreeLevels
  , Level
  , chunkSum
  , chunkTerms
  , adderTree
  , accumulate
  , filterStep
  , filterStepEach
  ) where

import Clash.Prelude
import Data.Proxy (Proxy (..))
import Data.Singletons (Apply, TyFun)

import K2C.Memory (Neuron)

-- | Products of @SFixed ai af@ inputs and @SFixed wi wf@ weights, and biases
-- @SFixed bi bf@, are aligned to the accumulator @SFixed ci cf@ without
-- losing a bit: the accumulator must have at least the fraction bits of a
-- product and of the bias.
type Accumulates ai af wi wf bi bf ci cf =
  ( KnownNat ai, KnownNat af, KnownNat wi, KnownNat wf
  , KnownNat bi, KnownNat bf, KnownNat ci, KnownNat cf
  , (af + wf) <= cf, bf <= cf )

-- | Integer bits (Clash counting, sign included) that hold the exact sum of
-- @ch@ products (@ai + wi@ integer bits each) and a bias (@bi@): the widest
-- term plus @ceil(log2(ch + 1))@ growth bits.
type ChunkInt ch ai wi bi = Max (ai + wi) bi + CLog 2 (ch + 1)

-- | Width of the exact chunk sum 'chunkSum' (fraction bits @cf@).
type ChunkBits ch ai wi bi cf = ChunkInt ch ai wi bi + cf

-- | @S_t@: the exact sum of the chunk's products and the bias field, as a raw
-- integer with @cf@ fraction bits.
chunkSum
  :: forall ch ai af wi wf bi bf cf
   . ( KnownNat ch, KnownNat ai, KnownNat af, KnownNat wi, KnownNat wf
     , KnownNat bi, KnownNat bf, KnownNat cf, (af + wf) <= cf, bf <= cf )
  => Vec ch (SFixed ai af)
  -> Neuron ch (SFixed wi wf) (SFixed bi bf)
  -> Signed (ChunkBits ch ai wi bi cf)
chunkSum xs neuron = fold (+) (chunkTerms xs neuron)

-- | The terms of 'chunkSum': the bias field, then the @ch@ products, each
-- sign-extended and shifted to @cf@ fraction bits in the exact chunk width.
chunkTerms
  :: forall ch ai af wi wf bi bf cf
   . ( KnownNat ch, KnownNat ai, KnownNat af, KnownNat wi, KnownNat wf
     , KnownNat bi, KnownNat bf, KnownNat cf, (af + wf) <= cf, bf <= cf )
  => Vec ch (SFixed ai af)
  -> Neuron ch (SFixed wi wf) (SFixed bi bf)
  -> Vec (ch + 1) (Signed (ChunkBits ch ai wi bi cf))
chunkTerms xs (ws, bias) = align cf bias :> zipWith (\x w -> align cf (mul x w)) xs ws
  where
    cf = SNat @cf

-- | Adder levels of the tree over a chunk's @ch + 1@ terms.
type TreeLevels ch = CLog 2 (ch + 1)

-- | Every level of the adder tree carries the same type: the sums are exact
-- in the chunk width, so no level needs a wider one.
data Level (a :: Type) (f :: TyFun Nat Type) :: Type
type instance Apply (Level a) k = a

-- | For each of @p@ PEs the sum of its @n@ terms (@n >= 1@), as a balanced
-- tree of @lv = ceil(log2 n)@ levels with a register after level @j@
-- whenever @l@ divides @j@ (@l = 0@: no register, a combinational tree), and
-- with @closed@ after the last level too. The terms are zero-padded to
-- @2^lv@; adders with a constant 0 input are wires after synthesis. A tag
-- (the engine's valid bits and counters) travels beside the sums through
-- registers of its own, reset to @idle@; the sums' registers have no reset.
-- Latency: @lv `div` l@ cycles, one more when @closed@ and @l@ does not
-- divide @lv@ (0 when @l = 0@).
adderTree
  :: forall dom lv p n s t
   . (HiddenClockResetEnable dom, KnownNat lv, KnownNat p, KnownNat n, KnownNat s, NFDataX t)
  => Int
  -> Bool
  -> t
  -> Signal dom t
  -> Signal dom (Vec p (Vec n (Signed s)))
  -> (Signal dom t, Signal dom (Vec p (Signed s)))
adderTree every closed idle tag terms =
  dtfold (Proxy @(Level (Signal dom t, Signal dom (Vec p (Signed s))))) (tag,) level leaves
  where
    leaves :: Vec (2 ^ lv) (Signal dom (Vec p (Signed s)))
    leaves = unbundle (transpose . map padTo <$> terms)
    padTo :: Vec n (Signed s) -> Vec (2 ^ lv) (Signed s)
    padTo xs = takeI (xs ++ repeat @(2 ^ lv) 0)
    level
      :: SNat j
      -> (Signal dom t, Signal dom (Vec p (Signed s)))
      -> (Signal dom t, Signal dom (Vec p (Signed s)))
      -> (Signal dom t, Signal dom (Vec p (Signed s)))
    level j (tagA, a) (_, b)
      | registered (snatToNum j + 1) = (register idle tagA, delay (errorX "adderTree: no sum yet") summed)
      | otherwise                    = (tagA, summed)
      where summed = zipWith (+) <$> a <*> b
    registered :: Int -> Bool
    registered depth = every > 0 && (depth `mod` every == 0 || (closed && depth == natToNum @lv))

-- | Sign-extend a value to @n@ bits, then shift it left to @cf@ fraction
-- bits: exact when @n@ holds its integer bits plus @cf@ fraction bits.
align :: forall n cf i f . (KnownNat n, KnownNat i, KnownNat f)
      => SNat cf -> SFixed i f -> Signed n
align cf x = shiftL (resize (unSF x)) (snatToNum cf - natToNum @f)

-- | One accumulator step: @sat(S_0)@ in a window's first chunk (@first@),
-- @sat(acc + S_t)@ in the others, with @S_t@ a raw integer with @cf@
-- fraction bits (from 'chunkSum'). The sum is exact; only the clamp to
-- @SFixed ci cf@ can change it. (Clash's own 'SFixed' @+@ saturates at the
-- operands' width, which is not this contract, hence the explicit clamp.)
--
-- @only@ (a constant: @b = 1@) says every chunk is a window's only one. Then
-- @acc_0 = sat(S_0)@ is the result, and when the accumulator is at least as
-- wide as @S_0@'s type the clamp could never act and is not built.
accumulate
  :: forall s ci cf
   . (KnownNat s, KnownNat ci, KnownNat cf)
  => Bool
  -> Bool
  -> SFixed ci cf
  -> Signed s
  -> SFixed ci cf
accumulate only first acc s
  | only && natToNum @s <= (natToNum @(ci + cf) :: Integer) = sf (SNat @cf) (resize s)
  | otherwise = sf (SNat @cf) (saturate (base + resize s))
  where
    base :: Signed (Max s (ci + cf) + 1)
    base = if first then 0 else resize (unSF acc)

    -- The clamp without comparators: @x@ fits @ci + cf@ bits exactly when its bits
    -- from there up are copies of that width's sign bit (all zeros or all ones), and
    -- a value that does not fit is above the range when non-negative, below it when
    -- negative. Equal to @x > hi -> hi; x < lo -> lo@, but a tree of LUTs after the
    -- adder's carry chain instead of two more chains (the thesis CNN at 132
    -- multipliers on ECP5: the adder and the two comparisons, 40 carry levels, 13.2 ns,
    -- in the loop through the accumulator register).
    saturate :: Signed (Max s (ci + cf) + 1) -> Signed (ci + cf)
    saturate x
      | fits          = resize x
      | isNegative    = minBound
      | otherwise     = maxBound
      where
        top        = shiftR x (natToNum @(ci + cf) - 1)  -- arithmetic: the sign bit and above
        fits       = top == 0 || top == -1
        isNegative = msb x == 1

-- | All @p@ PEs in one cycle: the same window chunk against the @p@ neuron
-- chunks of a ROM word, each PE with its own accumulator. @only@ and @first@
-- as for 'accumulate'.
filterStep
  :: forall p ch ai af wi wf bi bf ci cf
   . (KnownNat p, KnownNat ch, Accumulates ai af wi wf bi bf ci cf)
  => Bool
  -> Bool
  -> Vec ch (SFixed ai af)
  -> Vec p (SFixed ci cf)
  -> Vec p (Neuron ch (SFixed wi wf) (SFixed bi bf))
  -> Vec p (SFixed ci cf)
filterStep only first xs = filterStepEach only first (repeat xs)

-- | All @p@ PEs in one cycle, each with its own window chunk (a depthwise
-- layer's PE sees only its channel), its neuron chunk and its accumulator.
filterStepEach
  :: forall p ch ai af wi wf bi bf ci cf
   . (KnownNat ch, Accumulates ai af wi wf bi bf ci cf)
  => Bool
  -> Bool
  -> Vec p (Vec ch (SFixed ai af))
  -> Vec p (SFixed ci cf)
  -> Vec p (Neuron ch (SFixed wi wf) (SFixed bi bf))
  -> Vec p (SFixed ci cf)
filterStepEach only first = zipWith3 step
  where
    step xs acc neuron = accumulate only first acc (chunkSum @ch @ai @af @wi @wf @bi @bf @cf xs neuron)
