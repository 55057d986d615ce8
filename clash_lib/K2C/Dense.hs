{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The dense (fully connected) layer: the filter engine ("K2C.Engine") on the
layer's single input beat. The window is the whole input vector (@K = n@),
the filters are the @m@ neurons (@F = m@).

= Knobs and sizes

* @p@, @1 <= p <= m@: neurons computed in parallel; @G = ceil(m / p)@ groups.
* @b@, @1 <= b <= n@: cycles per group; chunks of @ch = ceil(n / b)@ inputs.
* multipliers @p * ch@; ROM @G * b@ words of @p * (ch * BitSize w +
  BitSize bias)@ bits; registers: input @b * ch@ values, @p@ accumulators (none
  needed when @b = 1@), the pipeline's registers when @l >= 1@, and an output
  queue of @Q@ vectors of @m@ values ("K2C.Engine").

= Timing (exact; see "K2C.Engine" for the rules under downstream stalls)

With @D@ the pipeline depth of @l@ adder levels per stage (0 when @l = 0@)
and downstream always ready, input @i@ is accepted in cycle
@a_i = max(v_i, a_(i-1) + G*b)@ (@v_i@: the first cycle it is offered) and
its output moves in cycle @a_i + G*b + D + 1@.

For a chain of layers, inputs back to back and downstream always ready, the
first output moves @sum (G_j*b_j + D_j + 1)@ cycles after the first input is
accepted and the outputs follow one every @max (G_j*b_j)@ cycles. A layer
faster than a later one is held back by it (its results wait in its output
queue, its input ready drops when the queue's credits run out;
"K2C.Engine"), so its accept cycles follow those rules rather than the
one-layer formula above; clash_lib/example/reference.py simulates them cycle
by cycle.
-}
module K2C.Dense
  ( dense
  ) where

import Clash.Prelude

import K2C.Activation (Finish, TableRegs)
import K2C.Engine (EngineShape, engine)
import K2C.Filter (Accumulates)
import K2C.Stream (Stream)
import K2C.WeightMemory (WeightMemory)

-- | A dense layer: @n@ inputs, @m@ outputs, @p@ processing elements, @b@
-- cycles per group of @p@ neurons, @l@ adder levels per pipeline stage. @finish@ is applied to every neuron's
-- accumulator: the layer's "requantize, then activate" ('K2C.Activation.Finish').
dense
  :: forall dom n m p b l ch g ai af wi wf bi bf ci cf o t mem
   . ( HiddenClockResetEnable dom, WeightMemory mem dom
     , EngineShape n m p b ch g, KnownNat l, TableRegs t
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX o )
  => SNat p
  -> SNat b
  -> SNat l
  -> mem (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) o
  -> Stream dom (Vec n (SFixed ai af)) (Vec m o)
dense = engine
